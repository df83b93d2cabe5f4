"""An incremental re-merge equals a full merge of the new corpus (seeded random corpora and changes).

The corpora are built so that every hard case occurs: names that differ only in case and spacing (one key),
entities that exist only as relation endpoints, entities that lose all their entity mentions but keep a relation
(and become endpoint-only), self-relations (dropped), repeated relations with summed weights, descriptions over
a small budget (flagged for a summary), and keys named by nothing after a delete (removed).
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.extraction.merge import merge_extractions
from hxd2_ray.graph_assembly.incremental import ExtractionIndex, apply, changed_entity_keys, remerge
from hxd2_ray.index_store import tables
from hxd2_ray.stages.columns import extractions_to_table
from hxd2_ray.stages.merge_stage import entities_to_table, relations_to_table
from hxd2_ray.types import EntityMention, Extraction, RelationMention

CFG = ExtractionConfig(description_token_budget=12)
NAMES = [
    "Ada Lovelace",
    "ada  lovelace",
    "Alan Turing",
    "ALAN TURING",
    "Grace Hopper",
    "Bletchley Park",
    "Analytical Engine",
    "Cambridge",
    "Navy",
    "COBOL",
    "Harvard Mark I",
    "Enigma",
]
DESCRIPTIONS = [
    "a mathematician",
    "worked on computing",
    "a place",
    "a machine",
    "wrote the first program",
    "",
    "a long description with many words that goes on and on past any small budget",
]


def count_tokens(text: str) -> int:
    return len(text.split())


def make_chunk(rng: random.Random, cid: str) -> Extraction:
    ents = tuple(
        EntityMention(
            rng.choice(NAMES[:9]), rng.choice(["person", "place", "unknown", "org"]), rng.choice(DESCRIPTIONS), cid
        )
        for _ in range(rng.randint(0, 4))
    )
    rels = []
    for _ in range(rng.randint(0, 4)):
        a, b = rng.choice(NAMES), rng.choice(NAMES)  # the last names are never entity mentions: endpoint-only
        rels.append(
            RelationMention(
                a,
                b,
                rng.choice(DESCRIPTIONS),
                tuple(rng.sample(["k1", "K1", "k2", "k3"], 2)),
                rng.choice([0.5, 1.0, 0.1, 0.7]),
                cid,
            )
        )
    error = "extraction failed" if rng.random() < 0.05 else ""
    return Extraction(cid, ents if not error else (), tuple(rels) if not error else (), error=error)


def as_tables(extractions: list[Extraction]) -> tuple[pa.Table, pa.Table]:
    ents, rels = merge_extractions(extractions, CFG, count_tokens)
    e = entities_to_table(ents).select(tables.ENTITIES.names).cast(tables.ENTITIES).sort_by("key")
    r = (
        relations_to_table(rels)
        .select(tables.RELATIONS.names)
        .cast(tables.RELATIONS)
        .sort_by([("source_key", "ascending"), ("target_key", "ascending")])
    )
    return e, r


@pytest.mark.parametrize("seed", range(12))
def test_remerge_of_a_random_change_equals_a_full_merge_of_the_new_corpus(seed: int) -> None:
    rng = random.Random(seed)
    old = [make_chunk(rng, f"c{i:03d}") for i in range(rng.randint(5, 40))]
    removed = {e.chunk_id for e in old if rng.random() < 0.3}
    added_chunks = [make_chunk(rng, f"n{i:03d}") for i in range(rng.randint(0, 10))]
    new = [e for e in old if e.chunk_id not in removed] + added_chunks
    old_e, old_r = as_tables(old)
    want_e, want_r = as_tables(new)

    # Rows stream a batch at a time (one row, a few, all at once): the merge must not depend on the batch size.
    index = ExtractionIndex(extractions_to_table(old + added_chunks), batch_rows=(1, 3, 4096)[seed % 3])
    added = {e.chunk_id for e in added_chunks if not e.error}
    got = remerge(old_e, old_r, removed, added, index, CFG, count_tokens)
    new_e, new_r = apply(old_e, old_r, got, got.entities, got.relations)

    assert new_e.to_pylist() == want_e.to_pylist()
    assert new_r.to_pylist() == want_r.to_pylist()
    # Only what the change touched was recomputed, and what it reports as changed is exactly what differs.
    assert got.stats["entities_recomputed"] <= len(got.entity_keys)
    before = {r["key"]: r for r in old_e.to_pylist()}
    after = {r["key"]: r for r in new_e.to_pylist()}
    differ = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert changed_entity_keys(old_e, new_e, got) == differ


def test_a_chunk_that_failed_before_and_succeeds_now_is_merged_in() -> None:
    ok = Extraction("c1", (EntityMention("Ada Lovelace", "person", "a mathematician", "c1"),))
    failed = Extraction("c2", error="timeout")
    healed = Extraction(
        "c2",
        (EntityMention("Ada Lovelace", "person", "wrote the first program", "c2"),),
        (RelationMention("Ada Lovelace", "Analytical Engine", "programmed", ("program",), 1.0, "c2"),),
    )
    old_e, old_r = as_tables([ok, failed])
    want_e, want_r = as_tables([ok, healed])
    got = remerge(old_e, old_r, set(), {"c2"}, ExtractionIndex(extractions_to_table([ok, healed])), CFG, count_tokens)
    new_e, new_r = apply(old_e, old_r, got, got.entities, got.relations)
    assert new_e.to_pylist() == want_e.to_pylist() and new_r.to_pylist() == want_r.to_pylist()
    assert {r["key"] for r in new_e.to_pylist()} == {"ada lovelace", "analytical engine"}


def test_a_delete_that_leaves_a_key_only_a_relation_endpoint_keeps_it_as_such_and_drops_the_unnamed() -> None:
    a = Extraction("c1", (EntityMention("Enigma", "machine", "a cipher machine", "c1"),))
    b = Extraction(
        "c2",
        (EntityMention("Alan Turing", "person", "broke it", "c2"),),
        (RelationMention("Alan Turing", "Enigma", "broke", ("cipher",), 1.0, "c2"),),
    )
    c = Extraction("c3", (EntityMention("Navy", "org", "a navy", "c3"),))
    old_e, old_r = as_tables([a, b, c])
    got = remerge(
        old_e, old_r, {"c1", "c3"}, set(), ExtractionIndex(extractions_to_table([a, b, c])), CFG, count_tokens
    )
    new_e, _ = apply(old_e, old_r, got, got.entities, got.relations)
    rows = {r["key"]: r for r in new_e.to_pylist()}
    assert set(rows) == {"alan turing", "enigma"}  # navy is named by nothing now
    assert rows["enigma"]["type"] == "unknown" and rows["enigma"]["description"] == ""
    assert rows["enigma"]["source_chunk_ids"] == ["c2"]


def test_the_extraction_index_streams_successful_rows_in_table_order_with_the_columns_asked() -> None:
    rng = random.Random(5)
    chunks = [make_chunk(rng, f"c{i:03d}") for i in range(23)]
    chunks[4] = Extraction("c004", error="timeout")
    table = extractions_to_table(chunks)
    wanted = {"c001", "c004", "c010", "c011", "c022", "unknown"}
    want = [
        {"chunk_id": r["chunk_id"], "relations": r["relations"]}
        for r in table.to_pylist()
        if r["chunk_id"] in wanted and not r["error"]
    ]
    for batch_rows in (1, 2, 3, 100):
        index = ExtractionIndex(table, batch_rows=batch_rows)
        assert list(index.rows(wanted, ("chunk_id", "relations"))) == want
        assert "c004" not in index and "c005" in index
        assert index.chunk_ids() == {e.chunk_id for e in chunks if not e.error}
