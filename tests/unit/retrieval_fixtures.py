"""A tiny, hand-shaped index for the query-engine tests, built through the library (no Ray, no models).

Graph (weights in brackets; degree of each entity after the name):

    Thomas Südhof (4) -- Stanford University (3) [3]     Robert Malenka (2) -- Stanford University [4]
    Thomas Südhof -- Nobel Prize (2) [5]                  Robert Malenka -- Synaptic Transmission [6]
    Thomas Südhof -- Synaptic Transmission (2) [2]        Brian Kobilka (2) -- Stanford University [2]
    Thomas Südhof -- Neurexin (1) [8]                     Brian Kobilka -- Nobel Prize [7]

So Südhof's edges rank by (degree sum, weight): Stanford (7, 3), Nobel (6, 5), Synaptic (6, 2), Neurexin
(5, 8): degree beats weight, weight breaks the tie. Chunks c1..c4 live in three documents whose source ids
are file names. Vectors are HashingEmbedder vectors of the texts the index job embeds (embed_stage).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa

from hxd2_ray.config import HashingEmbeddingConfig, HxdConfig, RetrievalConfig, ScriptedLLMConfig, VectorsConfig
from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.extraction.merge import normalize_name
from hxd2_ray.graph.kuzu_store import load_graph
from hxd2_ray.graph.read_structures import READS_DIR
from hxd2_ray.index_store import tables
from hxd2_ray.index_store.manifest import build_manifest, write_manifest
from hxd2_ray.indexer.query_reads import write_query_reads
from hxd2_ray.llm.base import LLMRequest, LLMResponse
from hxd2_ray.llm.scripted import ScriptedLLM
from hxd2_ray.stages.embed_stage import embedding_inputs
from hxd2_ray.vectors.faiss_index import write_family

DIM = 128
HOSTILE = "x'}) MATCH (n) DETACH DELETE n //"

DOCS = [
    ("d1", "thomas_sudhof.md", "/corpus/thomas_sudhof.md", "Thomas Südhof"),
    ("d2", "robert_malenka.txt", "/corpus/robert_malenka.txt", "Robert Malenka"),
    ("d3", "brian_kobilka.txt", "/corpus/brian_kobilka.txt", "Brian Kobilka"),
]
CHUNKS = [
    ("c1", "d1", 0, "Thomas Südhof is a neuroscientist at Stanford University."),
    ("c2", "d1", 1, "Südhof won the Nobel Prize for work on synaptic transmission and neurexin."),
    ("c3", "d2", 0, "Robert Malenka studies synaptic transmission at Stanford University."),
    ("c4", "d3", 0, "Brian Kobilka won the Nobel Prize and works at Stanford."),
]
# name, type, description, source chunks
ENTITIES = [
    ("Thomas Südhof", "person", "Thomas Südhof is a German-American biochemist who studies synapses.", ["c1", "c2"]),
    (
        "Stanford University",
        "organization",
        "Stanford University is a research university in California.",
        ["c1", "c3", "c4"],
    ),
    ("Nobel Prize", "event", "The Nobel Prize in Physiology or Medicine.", ["c2", "c4"]),
    ("Synaptic Transmission", "concept", "Synaptic transmission is how neurons signal across synapses.", ["c2", "c3"]),
    ("Neurexin", "gene", "Neurexins are presynaptic cell-adhesion proteins.", ["c2"]),
    ("Robert Malenka", "person", "Robert Malenka is a psychiatrist who studies synaptic plasticity.", ["c3"]),
    ("Brian Kobilka", "person", "Brian Kobilka is a physiologist who studies G-protein-coupled receptors.", ["c4"]),
]
RELATIONS = [
    ("Thomas Südhof", "Stanford University", "Südhof is a professor at Stanford University.", ["employment"], 3.0),
    ("Thomas Südhof", "Nobel Prize", "Südhof won the Nobel Prize in 2013.", ["award"], 5.0),
    ("Thomas Südhof", "Synaptic Transmission", "Südhof studies synaptic transmission.", ["research topic"], 2.0),
    ("Thomas Südhof", "Neurexin", "Südhof discovered neurexins.", ["discovery"], 8.0),
    ("Robert Malenka", "Stanford University", "Malenka works at Stanford University.", ["employment"], 4.0),
    ("Robert Malenka", "Synaptic Transmission", "Malenka studies synaptic transmission.", ["research topic"], 6.0),
    ("Brian Kobilka", "Stanford University", "Kobilka works at Stanford.", ["employment"], 2.0),
    ("Brian Kobilka", "Nobel Prize", "Kobilka won the Nobel Prize in Chemistry in 2012.", ["award"], 7.0),
]


def key(name: str) -> str:
    return normalize_name(name)


@dataclass(frozen=True)
class TinyIndex:
    root: Path
    cfg: HxdConfig
    counts: dict[str, int]


def tiny_tables(hostile: bool = False) -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    docs = pa.Table.from_pylist(
        [{"id": d, "source_id": s, "source_path": p, "title": t, "n_chars": 100} for d, s, p, t in DOCS],
        schema=tables.DOCUMENTS,
    )
    chunk_rows = [
        {
            "id": c,
            "doc_id": d,
            "order": o,
            "start": o * 80,
            "text": text,
            "header_path": "",
            "language": "en",
            "shard": 0,
        }
        for c, d, o, text in CHUNKS
    ]
    entity_rows = [
        {
            "key": key(n),
            "name": n,
            "type": t,
            "description": desc,
            "source_chunk_ids": srcs,
            "mention_count": len(srcs),
            "name_truncated": False,
        }
        for n, t, desc, srcs in ENTITIES
    ]
    if hostile:
        chunk_rows.append(
            {
                "id": "c5",
                "doc_id": "d3",
                "order": 1,
                "start": 80,
                "text": f"The string {HOSTILE} is data.",
                "header_path": "",
                "language": "en",
                "shard": 0,
            }
        )
        entity_rows.append(
            {
                "key": key(HOSTILE),
                "name": HOSTILE,
                "type": "concept",
                "description": "A hostile name.",
                "source_chunk_ids": ["c5"],
                "mention_count": 1,
                "name_truncated": False,
            }
        )
    relation_rows = []
    for s, t, desc, kws, w in RELATIONS:
        a, b = sorted((key(s), key(t)))
        relation_rows.append(
            {
                "source_key": a,
                "target_key": b,
                "description": desc,
                "keywords": kws,
                "weight": w,
                "source_chunk_ids": [],
                "mention_count": 1,
            }
        )
    return (
        docs,
        pa.Table.from_pylist(chunk_rows, schema=tables.CHUNKS),
        pa.Table.from_pylist(entity_rows, schema=tables.ENTITIES),
        pa.Table.from_pylist(relation_rows, schema=tables.RELATIONS),
    )


def index_config(dim: int = DIM, **retrieval: Any) -> HxdConfig:
    return HxdConfig(
        llm=ScriptedLLMConfig(),
        embedding=HashingEmbeddingConfig(dim=dim),
        vectors=VectorsConfig(num_shards=2, index_type="flat"),
        retrieval=RetrievalConfig(**retrieval),
    )


def write_index(
    root: Path,
    cfg: HxdConfig,
    docs: pa.Table,
    chunks: pa.Table,
    entities: pa.Table,
    relations: pa.Table,
    embed: Callable[[list[str]], np.ndarray],
    manifest: bool = True,
) -> dict[str, int]:
    """Graph, its read structures, the five vector families and the manifest (last), as the index job lays them
    out."""
    root.mkdir(parents=True, exist_ok=True)
    counts = load_graph(root / "graph.kuzu", docs, chunks.drop_columns(["shard"]), entities, relations)
    write_query_reads(root / "graph.kuzu", root / READS_DIR)
    inputs = embedding_inputs(entities, relations, chunks)
    families = {}
    for family in tables.VECTOR_FAMILIES:
        part = inputs.filter(pa.compute.equal(inputs.column("family"), family))
        keys = part.column("key").to_pylist()
        texts = part.column("text").to_pylist()
        vecs = embed(texts) if texts else np.zeros((0, cfg.embedding.dim), np.float32)
        families[family] = write_family(root, family, keys, vecs, cfg.vectors).to_dict()
    if manifest:
        write_manifest(root, build_manifest(cfg, "test-prompts", counts, families))
    return counts


def build_tiny_index(
    root: Path, *, hostile: bool = False, dim: int = DIM, manifest: bool = True, **retrieval: Any
) -> TinyIndex:
    cfg = index_config(dim, **retrieval)
    embedder = HashingEmbedder(dim=dim, model_id=cfg.embedding.model_id)
    counts = write_index(root, cfg, *tiny_tables(hostile), embed=embedder.embed, manifest=manifest)
    return TinyIndex(root=root, cfg=cfg, counts=counts)


def keyword_reply(low: list[str], high: list[str]) -> str:
    import json

    return json.dumps({"high_level_keywords": high, "low_level_keywords": low}, ensure_ascii=False)


def scripted_llm(
    keywords: str | Callable[[LLMRequest], str], answer: str = "The answer.", replies: Mapping[str, str] | None = None
) -> ScriptedLLM:
    """ScriptedLLM in handler mode: ``keywords`` for the keyword call, ``answer`` for the answer call."""

    def handler(req: LLMRequest) -> str | LLMResponse:
        if req.tag == "keywords":
            return keywords(req) if callable(keywords) else keywords
        if req.tag == "answer":
            return answer
        if replies and req.tag in replies:
            return replies[req.tag]
        raise AssertionError(f"unexpected LLM request tag {req.tag!r}")

    return ScriptedLLM(handler)
