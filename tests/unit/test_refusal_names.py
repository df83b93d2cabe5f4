"""The refusal gate agrees with retrieval: a question naming an entity of the index is never refused (the issue's
"Qinghe 17" case), and the threshold calibrated for the index when it was built is the one used."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from hxd2_ray.config import MultiStageConfig
from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.index_store import tables
from hxd2_ray.index_store.manifest import IndexManifest, read_manifest, write_manifest
from hxd2_ray.retrieval import open_index
from hxd2_ray.retrieval.refusal import RefusalGate, index_threshold
from hxd2_ray.retrieval.refusal_calibration import (
    calibrate_build,
    calibrate_index,
    chunk_questions,
    off_topic_questions,
    question_from_text,
)
from hxd2_ray.retrieval.results import Keywords
from tests.unit.retrieval_fixtures import DIM, index_config, key, write_index

RICE = [
    ("r1", "Qinghe 17 is a japonica rice variety bred by the Qinghe Agricultural Institute from Qinghe 5."),
    ("r2", "Plant height of Qinghe 17 is 98 cm, 13 cm taller than its parent Qinghe 5; growth period 152 days."),
    ("r3", "The variety resists rice blast and lodging, and suits single-season planting in the north."),
]
ENTS = [
    ("Qinghe 17", "work", ["r1", "r2"]),
    ("Qinghe 5", "work", ["r1", "r2"]),
    ("Qinghe Agricultural Institute", "organization", ["r1"]),
    ("japonica rice", "concept", ["r1"]),
    ("rice blast", "concept", ["r3"]),
]
RELS = [
    ("Qinghe 17", "Qinghe 5", "Qinghe 17 was bred from Qinghe 5.", ["parent variety"]),
    ("Qinghe Agricultural Institute", "Qinghe 17", "The institute bred Qinghe 17.", ["breeding"]),
]
QUESTION = "How much taller is Qinghe 17 than its parent?"
MADE_UP = Keywords(low_level=("Research affiliation",), high_level=("Field of study",))  # the small model's reply


def _rice_tables():
    docs = pa.Table.from_pylist(
        [
            {
                "id": "d1",
                "source_id": "qinghe17.md",
                "source_path": "/c/qinghe17.md",
                "title": "Qinghe 17",
                "n_chars": 300,
            }
        ],
        schema=tables.DOCUMENTS,
    )
    chunks = pa.Table.from_pylist(
        [
            {
                "id": c,
                "doc_id": "d1",
                "order": i,
                "start": 0,
                "text": t,
                "header_path": "Qinghe 17",
                "language": "en",
                "shard": 0,
            }
            for i, (c, t) in enumerate(RICE)
        ],
        schema=tables.CHUNKS,
    )
    ents = pa.Table.from_pylist(
        [
            {
                "key": key(n),
                "name": n,
                "type": t,
                "description": f"{n}.",
                "source_chunk_ids": s,
                "mention_count": len(s),
                "name_truncated": False,
            }
            for n, t, s in ENTS
        ],
        schema=tables.ENTITIES,
    )
    rels = pa.Table.from_pylist(
        [
            {
                "source_key": min(key(a), key(b)),
                "target_key": max(key(a), key(b)),
                "description": d,
                "keywords": k,
                "weight": 1.0,
                "source_chunk_ids": [],
                "mention_count": 1,
            }
            for a, b, d, k in RELS
        ],
        schema=tables.RELATIONS,
    )
    return docs, chunks, ents, rels


@pytest.fixture(scope="module")
def rice(tmp_path_factory):
    root = tmp_path_factory.mktemp("rice") / "index"
    cfg = index_config()
    embedder = HashingEmbedder(dim=DIM, model_id=cfg.embedding.model_id)
    write_index(root, cfg, *_rice_tables(), embed=embedder.embed)
    idx = open_index(root, cfg)
    yield root, cfg, idx, embedder
    idx.close()


def test_qinghe_17_is_answered_although_it_scores_below_the_threshold(rice):
    _, _, idx, embedder = rice
    ms = MultiStageConfig(refusal_rule="min", refusal_threshold=0.21)
    gate = RefusalGate.for_index(idx, embedder, ms)
    score = gate.score(QUESTION, MADE_UP)
    assert score.score < 0.21  # what refused it before: made-up keywords, a low question score
    assert score.named == ("Qinghe 17", key("Qinghe 17"), 1.0)
    assert not score.refused and score.to_dict()["named"]["key"] == key("Qinghe 17")
    # The names rule off, the same question is refused, as in the issue.
    assert (
        RefusalGate.for_index(idx, embedder, ms.model_copy(update={"refusal_names": False}))
        .score(QUESTION, MADE_UP)
        .refused
    )
    # Hyphens read as spaces, and a near-miss spelling passes too (fuzzy, ratio >= 90) ...
    assert gate.score("How tall is Qinghe-17 compared to its parent?", MADE_UP).named[1] == key("Qinghe 17")
    near = gate.score("What does the Qinghe Agricultural Institut breed?", MADE_UP).named
    assert near[1] == key("Qinghe Agricultural Institute") and 0.9 <= near[2] < 1.0
    # ... and an off-topic question still meets the threshold.
    off = gate.score("What is the weather forecast for Paris tomorrow?", Keywords(low_level=("weather",)))
    assert off.named is None and off.refused


def test_common_words_do_not_count_as_names(rice):
    _, _, idx, embedder = rice
    gate = RefusalGate(idx, embedder, 0.99, rule="question")
    # "rice" and "blast" are lower-case single words; "rice blast" is an entity, a two-word n-gram: named.
    assert gate.score("Is rice cheap?", None).refused
    assert not gate.score("How do farmers fight rice blast?", None).refused


def test_the_index_threshold_is_used_when_calibrated_for_the_rule(rice, tmp_path):
    root, cfg, idx, embedder = rice
    manifest = idx.manifest.model_copy(update={"refusal": {"rule": "question", "threshold": 0.42, "f1": 0.9}})
    assert index_threshold(manifest, "question") == 0.42
    assert index_threshold(manifest, "min") is None and index_threshold(idx.manifest, "question") is None

    class _Idx:  # the open index with the calibrated manifest
        def __init__(self):
            self.manifest, self.graph, self.names, self.family = manifest, idx.graph, idx.names, idx.family

    ms = MultiStageConfig(refusal_rule="question", refusal_threshold=0.1)
    gate = RefusalGate.for_index(_Idx(), embedder, ms)
    assert (gate.threshold, gate.threshold_source) == (0.42, "index")
    assert gate.score("anything at all", None).to_dict()["threshold_source"] == "index"
    assert RefusalGate.for_index(_Idx(), embedder, ms.model_copy(update={"refusal_rule": "min"})).threshold == 0.1
    assert (
        RefusalGate.for_index(_Idx(), embedder, ms.model_copy(update={"refusal_index_threshold": False})).threshold
        == 0.1
    )


def test_questions_made_from_chunks():
    assert (
        question_from_text("# Qinghe 17\nQinghe 17 is a japonica rice variety bred in the north of China in 2009.")
        == "What is known about Qinghe 17 Qinghe 17 is a japonica rice variety bred in the?"
    )  # 12 words
    assert (
        question_from_text("青禾17号是粳稻品种，由青禾5号选育而成。株高98厘米。")
        == "关于“青禾17号是粳稻品种，由青禾5号选育而成”有什么信息？"
    )
    assert question_from_text("   ") is None
    texts = [f"Passage number {i} talks about topic {i} at some length." for i in range(50)]
    first = chunk_questions(texts, 10, seed=3)
    assert first == chunk_questions(texts, 10, seed=3) and len(set(first)) == 10
    assert first != chunk_questions(texts, 10, seed=4)
    assert chunk_questions(texts[::-1], 10, seed=3) == first  # the chunks' order does not matter
    bad = off_topic_questions()
    assert len(bad) >= 60 and all(isinstance(q, str) and q for q in bad)


def test_calibration_of_an_index_with_its_f1(rice):
    _, _, idx, embedder = rice
    record = calibrate_index(idx, embedder, [t for _, t in RICE] * 3)
    assert record["rule"] == "question" and -1 <= record["threshold"] <= 1
    assert record["n_good"] == 3 and record["n_bad"] == len(off_topic_questions())
    assert 0 < record["f1"] <= 1 and set(record["with_names"]) >= {"precision", "recall", "f1"}
    # Every positive names "Qinghe 17" or scores above the cut: the gate as it runs answers them all.
    assert record["with_names"]["recall"] == 1.0


def test_calibration_of_a_build_folder_lands_in_the_manifest(rice, tmp_path):
    root, cfg, idx, embedder = rice
    record = calibrate_build(root, pa.chunked_array([[t for _, t in RICE]]), embedder=embedder)
    assert record is not None and "error" not in record and record["seconds"] >= 0
    manifest = IndexManifest.create(
        fingerprint="f",
        prompt_version="p",
        llm_model_id="l",
        embedding_model_id="e",
        embedding_dim=DIM,
        counts={},
        vector_families={},
        config={},
        refusal=record,
        synonyms={"enabled": True, "k": 10, "threshold": 0.85, "edges": 3},
    )
    write_manifest(tmp_path, manifest)
    back = read_manifest(tmp_path)
    assert back.refusal["threshold"] == record["threshold"] and back.synonyms["edges"] == 3
    raw = json.loads((tmp_path / "manifest.json").read_text())
    assert raw["refusal"]["rule"] == "question"
    failed = calibrate_build(tmp_path / "nowhere", ["text"], embedder=embedder)
    assert "error" in failed  # reported, never raised: the build goes on with the configured threshold


def test_calibration_of_a_build_folder_with_an_injected_embedder_factory(rice):
    root, _cfg, _idx, embedder = rice
    closed: list[bool] = []

    class Owned:  # the embedder a factory makes is the calibration's own: closed after
        def __getattr__(self, name: str) -> object:
            return getattr(embedder, name)

        def close(self) -> None:
            closed.append(True)

    record = calibrate_build(root, pa.chunked_array([[t for _, t in RICE]]), make_embedder=Owned)
    assert record is not None and "error" not in record and closed == [True]
    with pytest.raises(TypeError):
        calibrate_build(root, ["text"])  # the caller injects the embedder (or its factory): none is built here
