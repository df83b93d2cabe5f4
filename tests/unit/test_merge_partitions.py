"""The merge's explode and group functions give the same rows whether every key meets in one partition (the
indexing job's in-driver merge of a small input) or the keys are spread over several (the distributed merge,
one group per hash partition), on seeded random extractions with the hard cases of test_incremental_merge."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hxd2_ray.config import HxdConfig
from hxd2_ray.stages.columns import extractions_to_table
from hxd2_ray.stages.merge_stage import (
    ExplodeEntityMentions,
    ExplodeRelationMentions,
    MergeEntityGroups,
    MergeRelationGroups,
)
from tests.unit.test_incremental_merge import make_chunk

CFG = HxdConfig.model_validate({"extraction": {"description_token_budget": 12}})


def _merged(extractions: pa.Table, partitions: int) -> tuple[list[dict], list[dict]]:
    merged = []
    for explode, merge in ((ExplodeEntityMentions, MergeEntityGroups), (ExplodeRelationMentions, MergeRelationGroups)):
        mentions = explode(CFG, partitions)(extractions)
        groups = [mentions.filter(pc.equal(mentions.column("partition"), p)) for p in range(partitions)]
        rows = [row for g in groups if g.num_rows for row in merge(CFG)(g).to_pylist()]
        merged.append(sorted(rows, key=repr))
    return merged[0], merged[1]


@pytest.mark.parametrize("seed", range(8))
def test_one_partition_merges_to_the_rows_of_several(seed: int) -> None:
    rng = random.Random(seed)
    extractions = extractions_to_table([make_chunk(rng, f"c{i:03d}") for i in range(rng.randint(5, 60))])
    one = _merged(extractions, 1)
    for partitions in (2, 5):
        assert _merged(extractions, partitions) == one
    assert one[0] and one[1]
