"""A corpus as tables and its changes (add, update, delete by id or source), and an index's generations."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from hxd2_ray.chunking.splitter import split_document
from hxd2_ray.config import ChunkingConfig, IngestConfig
from hxd2_ray.errors import HxdError
from hxd2_ray.index_store import tables
from hxd2_ray.index_store.corpus import corpus_from_parsed, delete, derive_documents, upsert
from hxd2_ray.index_store.generations import (
    CorpusState,
    history,
    next_generation_id,
    prune,
    query_root,
    read_state,
    write_state,
)
from hxd2_ray.index_store.manifest import IndexManifest
from hxd2_ray.ingest.sources import read_documents
from hxd2_ray.stages.columns import parsed_rows


def parse(files: dict[str, str]):
    """What ingest makes of these files (path -> content), in one process."""
    docs, quarantined = [], []
    for path, text in files.items():
        d, q = read_documents(path, text.encode(), IngestConfig())
        quarantined += q
        docs += [(doc, split_document(doc, ChunkingConfig(chunk_size_chars=64, overlap_chars=0))) for doc in d]
    return corpus_from_parsed(parsed_rows(docs, quarantined), 4, paths=list(files))


V1 = {
    "/c/a.txt": "Ada Lovelace wrote the first program for the Analytical Engine designed by Babbage.",
    "/c/b.jsonl": "\n".join(
        json.dumps(r)
        for r in [
            {"id": "r1", "text": "Alan Turing worked at Bletchley Park on the Enigma machine."},
            {"id": "r2", "text": "Grace Hopper wrote COBOL compilers for the Navy."},
            {"id": "r3", "text": "Ada Lovelace wrote the first program for the Analytical Engine designed by Babbage."},
        ]
    ),
    "/c/bad.bin": "\x00\x01binary",
}


def test_duplicates_are_kept_as_sources_and_documents_keep_the_first_in_path_order():
    corpus = parse(V1)
    assert sorted(corpus.sources.column("source_id").to_pylist()) == ["/c/a.txt", "r1", "r2", "r3"]
    docs = derive_documents(corpus.sources)
    assert docs.num_rows == 3  # r3 has a.txt's text
    assert docs.column("source_id").to_pylist()[0] == "/c/a.txt"
    assert corpus.quarantine.column("source_path").to_pylist() == ["/c/bad.bin"]
    assert len(set(corpus.chunks.column("id").to_pylist())) == corpus.chunks.num_rows


def test_an_upsert_equals_parsing_the_final_corpus():
    v1 = parse(V1)
    incoming = {
        "/c/a.txt": "Ada Lovelace corresponded with Charles Babbage about Bernoulli numbers.",
        "/c/new.txt": "Katherine Johnson computed trajectories for NASA missions.",
    }
    change = upsert(v1.sources, v1.quarantine, v1.chunks, parse(incoming))
    assert change.added == ("/c/new.txt",) and change.updated == ("/c/a.txt",) and change.unchanged == 0
    final = parse({**V1, **incoming})
    assert change.sources.sort_by("source_id").to_pylist() == final.sources.sort_by("source_id").to_pylist()
    assert change.documents.to_pylist() == derive_documents(final.sources).to_pylist()
    assert (
        change.chunks.to_pylist()
        == final.chunks.sort_by("id")
        .take(
            pa.array(
                [
                    final.chunks.sort_by("id").column("id").to_pylist().index(c)
                    for c in change.chunks.column("id").to_pylist()
                ]
            )
        )
        .to_pylist()
    )
    assert set(change.chunks.column("id").to_pylist()) == set(final.chunks.column("id").to_pylist())
    # a.txt's old text lives on as r3's document: its chunks stay; only the new texts' chunks were added.
    assert change.chunks_removed == frozenset()
    assert change.chunks_added == set(final.chunks.column("id").to_pylist()) - set(v1.chunks.column("id").to_pylist())


def test_reading_the_same_files_again_changes_nothing():
    v1 = parse(V1)
    change = upsert(v1.sources, v1.quarantine, v1.chunks, parse(V1))
    assert not change.changed and change.unchanged == 4 and not change.chunks_added and not change.chunks_removed


def test_delete_by_id_and_by_source_and_refuse_unknown_names():
    v1 = parse(V1)
    change = delete(v1.sources, v1.quarantine, v1.chunks, ["r1"], ["/c/a.txt", "/c/bad.bin"])
    assert change.deleted == ("/c/a.txt", "r1")
    assert sorted(change.sources.column("source_id").to_pylist()) == ["r2", "r3"]
    assert change.quarantine.num_rows == 0
    assert change.documents.column("source_id").to_pylist() == ["r2", "r3"]  # r3 now carries the shared text
    assert {c for c in change.chunks_removed} and not change.chunks_added
    by_folder = delete(v1.sources, v1.quarantine, v1.chunks, [], ["/c"])
    assert by_folder.documents.num_rows == 0
    with pytest.raises(HxdError, match="nothing was deleted.*'nope'.*'/d/x.txt'"):
        delete(v1.sources, v1.quarantine, v1.chunks, ["r1", "nope"], ["/d/x.txt"])


def _manifest(generation: str, generations: list[dict]) -> IndexManifest:
    return IndexManifest.create(
        fingerprint="f",
        prompt_version="p",
        llm_model_id="l",
        embedding_model_id="e",
        embedding_dim=4,
        counts={},
        vector_families={},
        config={},
        generation=generation,
        generations=generations,
    )


def test_generation_ids_history_and_pruning(tmp_path):
    assert next_generation_id(None) == "g000001"
    assert next_generation_id(_manifest("", [])) == "g000001"  # an index from before generations
    g1 = _manifest("g000001", history(None, "g000001", "build", {}))
    assert next_generation_id(g1) == "g000002"
    hist = history(g1, "g000002", "update", {"added": 1})
    assert [(h["id"], h["parent"], h["kind"]) for h in hist] == [
        ("g000001", "", "build"),
        ("g000002", "g000001", "update"),
    ]
    g3 = _manifest("g000003", history(_manifest("g000002", hist), "g000003", "delete", {}))
    root = tmp_path / "index"
    for name in ("g000001", "g000002", "g000003", "g000004", ".building-g000004-x"):
        (root / "generations" / name).mkdir(parents=True)
    (root / "graph.kuzu").write_text("flat layout")
    removed = prune(pafs.LocalFileSystem(), str(root), g3, keep=2)
    assert sorted(p.name for p in (root / "generations").iterdir()) == ["g000002", "g000003"]
    assert "generations/g000001" in removed and not (root / "graph.kuzu").exists()
    assert query_root(str(root), g3) == f"{root}/generations/g000003"
    assert query_root(str(root), _manifest("", [])) == str(root)


def test_an_index_from_before_generations_keeps_its_flat_files_for_its_readers(tmp_path):
    root = tmp_path / "index"
    (root / "generations" / "g000001").mkdir(parents=True)
    (root / "graph.kuzu").write_text("flat layout")
    legacy = _manifest("", [])
    first = _manifest("g000001", history(legacy, "g000001", "update", {}))
    assert [h["id"] for h in first.generations] == ["", "g000001"]
    prune(pafs.LocalFileSystem(), str(root), first, keep=2)
    assert (root / "graph.kuzu").exists()
    prune(pafs.LocalFileSystem(), str(root), first, keep=1)
    assert not (root / "graph.kuzu").exists()


def test_the_corpus_state_round_trips_through_a_generation(tmp_path):
    v1 = parse(V1)
    state = CorpusState(
        sources=v1.sources,
        documents=derive_documents(v1.sources),
        chunks=v1.chunks,
        quarantine=v1.quarantine,
        entities=tables.ENTITIES.empty_table(),
        relations=tables.RELATIONS.empty_table(),
        merged_chunks=pa.table({"chunk_id": ["x"]}, schema=tables.MERGED_CHUNKS),
    )
    write_state(str(tmp_path / "index" / "generations" / "g000001"), state)
    back = read_state(pafs.LocalFileSystem(), str(tmp_path / "index"), _manifest("g000001", []))
    for name in ("sources", "documents", "chunks", "quarantine", "entities", "relations", "merged_chunks"):
        assert back.table(name).to_pylist() == state.table(name).to_pylist(), name
    assert back.merged_chunk_ids() == {"x"}
