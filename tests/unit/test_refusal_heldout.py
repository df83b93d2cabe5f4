"""The refusal gate holds on data nobody tuned it to: a small corpus of invented technical documents
(``tests/data/refusal_heldout``: a rice variety "Qinghe 17" and its parent, a pump with part numbers, a sensor
board, an alloy, a bridge report, a scheduler, one Chinese page), its own questions written by hand, and
off-topic questions that are not in the shipped negatives (``hxd2_ray/sample_data/off_topic_heldout.jsonl``, which
every ``hxd2 eval run`` report measures its gate on too). The index is built as a small extractor leaves it
(generic entity names only, so the names rule finds little), calibrated as a build calibrates it (15 chunks:
fewer than 50 positives, so the conservative threshold and its notice), and the gate runs as ``auto`` runs it.

In-corpus refusals <= 1% and off-topic refusals >= 90%. Real Kùzu, Faiss, bm25s and hashing vectors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pytest

from hxd2_ray.config import MultiStageConfig
from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.index_store import tables
from hxd2_ray.index_store.manifest import read_manifest, write_manifest
from hxd2_ray.retrieval import open_index
from hxd2_ray.retrieval.lexical import LexicalIndex, lexical_tokens, write_lexical
from hxd2_ray.retrieval.refusal import RefusalGate
from hxd2_ray.retrieval.refusal_calibration import MIN_POSITIVES, calibrate_index, off_topic_questions
from hxd2_ray.runs.refusal_rates import held_out_off_topic
from tests.unit.retrieval_fixtures import DIM, index_config, key, write_index

DATA = Path(__file__).resolve().parents[1] / "data" / "refusal_heldout"
MAX_IN_CORPUS_REFUSED = 0.01
MIN_OFF_TOPIC_REFUSED = 0.90
# What a small extractor keeps: common nouns, no product names (so the gate cannot lean on names alone).
ENTITIES = {
    "qinghe17": ["rice variety", "crop station"],
    "tx40": ["centrifugal pump", "mechanical seal"],
    "orrin": ["sensor board", "firmware"],
    "kestrel": ["superalloy", "turbine blade"],
    "halvard": ["concrete bridge", "expansion joint"],
    "pangu": ["job scheduler", "heartbeat"],
    "qinghe17zh": ["粳稻品种"],
}


def _questions(name: str) -> list[str]:
    lines = (DATA / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["question"] for line in lines if line.strip()]


def _corpus() -> list[dict[str, str]]:
    lines = (DATA / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _tables() -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    rows = _corpus()
    docs = {r["doc"]: r["title"] for r in rows}
    documents = pa.Table.from_pylist(
        [
            {"id": d, "source_id": f"{d}.md", "source_path": f"/c/{d}.md", "title": t, "n_chars": 500}
            for d, t in docs.items()
        ],
        schema=tables.DOCUMENTS,
    )
    chunks = pa.Table.from_pylist(
        [
            {
                "id": f"c{i}",
                "doc_id": r["doc"],
                "order": i,
                "start": 0,
                "text": r["text"],
                "header_path": r["title"],
                "language": "zh" if r["doc"].endswith("zh") else "en",
                "shard": 0,
            }
            for i, r in enumerate(rows)
        ],
        schema=tables.CHUNKS,
    )
    chunks_of: dict[str, list[str]] = {}
    for i, r in enumerate(rows):
        chunks_of.setdefault(r["doc"], []).append(f"c{i}")
    entities = pa.Table.from_pylist(
        [
            {
                "key": key(n),
                "name": n,
                "type": "concept",
                "description": f"A {n}.",
                "source_chunk_ids": chunks_of[d],
                "mention_count": 1,
                "name_truncated": False,
            }
            for d, names in ENTITIES.items()
            for n in names
        ],
        schema=tables.ENTITIES,
    )
    relations = pa.Table.from_pylist(
        [
            {
                "source_key": key(a),
                "target_key": key(b),
                "description": f"{a} and {b}.",
                "keywords": ["part of"],
                "weight": 1.0,
                "source_chunk_ids": [],
                "mention_count": 1,
            }
            for names in ENTITIES.values()
            if len(names) == 2
            for a, b in [sorted(names, key=key)]
        ],
        schema=tables.RELATIONS,
    )
    return documents, chunks, entities, relations


@pytest.fixture(scope="module")
def heldout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("heldout") / "index"
    cfg = index_config()
    embedder = HashingEmbedder(dim=DIM, model_id=cfg.embedding.model_id)
    documents, chunks, entities, relations = _tables()
    write_index(root, cfg, documents, chunks, entities, relations, embed=embedder.embed)
    texts = chunks.column("text").to_pylist()
    write_lexical(root, chunks.column("id").to_pylist(), texts)
    with open_index(root, cfg) as idx:
        record = calibrate_index(idx, embedder, texts)
    assert record is not None
    write_manifest(root, read_manifest(root).model_copy(update={"refusal": record}))
    idx = open_index(root, cfg)
    yield idx, embedder, record
    idx.close()


def _refused_share(gate: RefusalGate, questions: list[str]) -> float:
    return sum(s.refused for s in gate.scores(questions, [None] * len(questions))) / len(questions)


def test_the_held_out_questions_are_not_the_shipped_negatives() -> None:
    shipped = {q.casefold() for q in off_topic_questions()}
    shipped |= {
        json.loads(line)["question"].casefold()
        for line in (Path(__file__).resolve().parents[2] / "hxd2_ray" / "sample_data" / "refusal_bad.jsonl")
        .read_text(encoding="utf-8")
        .splitlines()
        if line.strip()
    }
    assert not shipped & {q.casefold() for q in held_out_off_topic()}


def test_a_small_corpus_gets_the_conservative_threshold_and_says_so(heldout: Any) -> None:
    _, _, record = heldout
    assert record["n_good"] < MIN_POSITIVES and record["conservative"]
    assert record["threshold"] <= record["fitted_threshold"]
    assert "conservative threshold" in record["notice"] and str(record["n_good"]) in record["notice"]
    assert record["lexical_level"] > 0


def test_in_corpus_questions_are_answered_and_off_topic_ones_refused(heldout: Any) -> None:
    # The rule every build calibrates and the shipped configs use (configs/*.yaml: refusal_rule question).
    idx, embedder, _ = heldout
    gate = RefusalGate.for_index(idx, embedder, MultiStageConfig(refusal_rule="question"))
    assert gate.threshold_source == "index" and gate.lexical_level is not None
    in_corpus, off_topic = _questions("in_corpus.jsonl"), held_out_off_topic()
    refused_in = _refused_share(gate, in_corpus)
    refused_off = _refused_share(gate, off_topic)
    assert refused_in <= MAX_IN_CORPUS_REFUSED, [
        (q, s.to_dict()) for q, s in zip(in_corpus, gate.scores(in_corpus, [None] * len(in_corpus))) if s.refused
    ]
    assert refused_off >= MIN_OFF_TOPIC_REFUSED, [
        (q, s.to_dict()) for q, s in zip(off_topic, gate.scores(off_topic, [None] * len(off_topic))) if not s.refused
    ]


def test_the_issue_question_is_answered_by_its_lexical_match_build_after_build(heldout: Any) -> None:
    idx, embedder, _ = heldout
    gate = RefusalGate.for_index(idx, embedder, MultiStageConfig(refusal_rule="question", refusal_names=False))
    score = gate.score("How much taller is Qinghe 17 than its parent?")
    assert score.lexical_match and not score.refused, score.to_dict()
    off = MultiStageConfig(refusal_rule="question", refusal_names=False, refusal_lexical=False)
    unchecked = RefusalGate.for_index(idx, embedder, off).score("How much taller is Qinghe 17 than its parent?")
    assert unchecked.lexical_level is None and not unchecked.lexical_match  # the channel off: the cosine decides


def test_lexical_tokens_read_english_codes_and_chinese_words() -> None:
    assert lexical_tokens("Replace part TX-40-113 of the Qinghe 17!") == [
        "replace",
        "part",
        "tx",
        "40",
        "113",
        "qinghe",
        "17",
    ]
    assert "青禾" in lexical_tokens("青禾17号比亲本高多少") and "17" in lexical_tokens("青禾17号")
    index = LexicalIndex.build(["a", "b"], ["Qinghe 17 rice", "TX-40 pump"])
    assert [c for c, _ in index.search("qinghe 17?", 5)] == ["a"] and index.search("the of", 5) == []


def test_a_given_topic_that_is_an_entity_of_the_index_answers(heldout: Any) -> None:
    idx, embedder, _ = heldout
    gate = RefusalGate.for_index(idx, embedder, MultiStageConfig(refusal_rule="question", refusal_lexical=False))
    assert gate.score("tell me more", topic="Crop Station").named == ("Crop Station", key("crop station"), 1.0)
    assert gate.score("tell me more", topic="Atlantis").named is None
