"""The embed stage's bookkeeping in Arrow (``embedding_texts.text_keys``, ``texts_to_embed``,
``steps.vector_ids``) equals the plain Python rules it replaced: a key per text, each missing text once at its
first occurrence, a vector id per key."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from hxd2_ray.graph_assembly.embedding_texts import (
    EMBED_INPUTS,
    embedding_inputs,
    text_key,
    text_keys,
    texts_to_embed,
)
from hxd2_ray.indexer.steps import vector_ids
from hxd2_ray.types import vector_id


def _texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    words = ["ada", "turing", "engine", "cipher", "navy", "", "北京", "x" * 50]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(0, 3))) for _ in range(n)]


@pytest.mark.parametrize("seed", range(6))
def test_missing_texts_once_each_at_their_first_occurrence(seed: int) -> None:
    texts = _texts(seed, 300)
    stored = [text_key(t) for t in _texts(seed + 100, 40)]
    column = pa.chunked_array([texts[:100], texts[100:], []], pa.string())
    keys = text_keys(column, batch_rows=(1, 7, 65_536)[seed % 3])
    assert keys.to_pylist() == [text_key(t) for t in texts]

    want: dict[str, str] = {}
    for k, t in zip(keys.to_pylist(), texts, strict=True):
        if k not in set(stored):
            want.setdefault(k, t)
    got = texts_to_embed(keys, column, pa.array(stored, pa.string()))
    assert got.column("text_key").to_pylist() == list(want)
    assert got.column("text").to_pylist() == list(want.values())


def test_nothing_stored_and_everything_stored() -> None:
    texts = ["a", "b", "a", "c"]
    keys = text_keys(pa.array(texts))
    assert texts_to_embed(keys, pa.array(texts), pa.array([], pa.string())).column("text").to_pylist() == [
        "a",
        "b",
        "c",
    ]
    assert texts_to_embed(keys, pa.array(texts), keys).num_rows == 0
    assert text_keys(pa.array([], pa.string())).to_pylist() == []


def test_vector_ids_in_batches() -> None:
    keys = pa.chunked_array([[f"k{i}" for i in range(50)], [f"j{i}" for i in range(31)]])
    assert vector_ids(keys, batch_rows=8).to_pylist() == [vector_id(k) for k in keys.to_pylist()]
    assert vector_ids(pa.chunked_array([], pa.string())).to_pylist() == []


def test_the_chunk_family_comes_from_the_chunk_columns_after_entities_and_relations() -> None:
    entities = pa.table({"key": ["ada"], "name": ["Ada"], "description": ["a mathematician"]})
    relations = pa.table(
        {"source_key": ["ada"], "target_key": ["engine"], "keywords": [["program"]], "description": ["wrote"]}
    )
    chunks = pa.table({"id": ["c1", "c2"], "text": ["Ada wrote.", "The engine."]})
    got = embedding_inputs(entities, relations, chunks)
    assert got.schema == EMBED_INPUTS
    assert got.column("family").to_pylist() == [
        "entity_name",
        "entity_mix",
        "relation_keywords",
        "relation_mix",
        "chunk",
        "chunk",
    ]
    assert got.column("key").to_pylist()[-2:] == ["c1", "c2"]
    assert got.column("text").to_pylist()[-2:] == ["Ada wrote.", "The engine."]
