"""read_extractions' choice of one staged extraction per chunk: the first successful one, else the first failure."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from hxd2_ray.index_store import tables
from hxd2_ray.indexer.steps import latest_per_chunk


def _staged(rows: list[tuple[str, str, int]], pieces: int) -> pa.Table:
    """Extraction rows (chunk id, error, a marker in llm_calls) split into ``pieces`` chunks, as staged files read."""
    full = tables.EXTRACTIONS.empty_table().to_pylist()
    for chunk_id, error, marker in rows:
        full.append(
            {
                "chunk_id": chunk_id,
                "entities": [],
                "relations": [],
                "content_keywords": [],
                "malformed_records": 0,
                "llm_calls": marker,
                "ungrounded_entities": 0,
                "ungrounded_relations": 0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "error": error,
            }
        )
    table = pa.Table.from_pylist(full, schema=tables.EXTRACTIONS)
    size = max(1, -(-len(rows) // pieces))
    return pa.concat_tables([table.slice(i, size) for i in range(0, len(rows), size)] or [table])


def _reference(rows: list[tuple[str, str, int]], wanted: set[str]) -> list[int]:
    best: dict[str, tuple[str, int]] = {}
    for chunk_id, error, marker in rows:
        if chunk_id not in wanted:
            continue
        if chunk_id not in best or (not error and best[chunk_id][0]):
            best[chunk_id] = (error, marker)
    return [best[c][1] for c in sorted(best)]


@pytest.mark.parametrize("seed", range(6))
def test_first_success_else_first_failure_sorted_by_chunk(seed):
    rng = random.Random(seed)
    ids = [f"c{rng.randrange(10**6):06x}" + rng.choice(["", "é", "z"]) for _ in range(300)]
    rows = [(rng.choice(ids), rng.choice(["", "", "timeout", "bad json"]), marker) for marker in range(2000)]
    wanted = set(rng.sample(ids, 200)) | {"never staged"}
    chosen = latest_per_chunk(_staged(rows, pieces=rng.choice([1, 7, 500])), pa.table({"id": sorted(wanted)}))
    assert chosen.schema == tables.EXTRACTIONS
    assert chosen.column("llm_calls").to_pylist() == _reference(rows, wanted)
    assert chosen.column("chunk_id").to_pylist() == sorted(set(chosen.column("chunk_id").to_pylist()))


def test_nothing_wanted_or_nothing_staged():
    staged = _staged([("a", "", 1)], pieces=1)
    assert latest_per_chunk(staged, pa.table({"id": pa.array([], pa.string())})).num_rows == 0
    empty = latest_per_chunk(tables.EXTRACTIONS.empty_table(), pa.table({"id": ["a"]}))
    assert empty.num_rows == 0 and empty.schema == tables.EXTRACTIONS
