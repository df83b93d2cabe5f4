"""The build's merge turns into Python objects only the relation mentions that name an endpoint outside the
entities (``merge_stage.naming_unknown``), and the endpoint-only entities made from them are the ones made from
every mention."""

from __future__ import annotations

import random

from hxd2_ray.config import HxdConfig
from hxd2_ray.extraction.merge import missing_endpoint_entities
from hxd2_ray.stages.columns import extractions_to_table, naming_unknown
from hxd2_ray.stages.merge_stage import ExplodeEntityMentions, ExplodeRelationMentions
from hxd2_ray.types import EntityMention, Extraction, RelationMention

NAMES = ["Ada Lovelace", "ada  lovelace", "Alan Turing", "Grace Hopper", "Enigma", "COBOL", "Navy", "Harvard Mark I"]


def _corpus(seed: int) -> list[Extraction]:
    rng = random.Random(seed)
    out = []
    for i in range(rng.randint(3, 30)):
        cid = f"c{i:03d}"
        ents = tuple(EntityMention(rng.choice(NAMES[:4]), "person", "d", cid) for _ in range(rng.randint(0, 3)))
        rels = tuple(
            RelationMention(rng.choice(NAMES), rng.choice(NAMES), "r", ("k",), 1.0, cid)
            for _ in range(rng.randint(0, 4))
        )
        out.append(Extraction(cid, ents, rels))
    return out


def test_only_mentions_with_an_unknown_endpoint_are_kept_and_they_make_the_same_entities() -> None:
    cfg = HxdConfig()
    for seed in range(20):
        table = extractions_to_table(_corpus(seed))
        mentions = ExplodeRelationMentions(cfg)(table)
        known = set(ExplodeEntityMentions(cfg)(table).column("key").to_pylist())
        kept = naming_unknown(mentions, known)
        ends = [p.split("\x1f") for p in mentions.column("pair").to_pylist()]
        assert kept.num_rows == sum(1 for a, b in ends if a not in known or b not in known)

        def made(rows: list[dict]) -> list:
            return missing_endpoint_entities(
                known,
                (
                    RelationMention(
                        r["source"], r["target"], r["description"], tuple(r["keywords"]), 1.0, r["chunk_id"]
                    )
                    for r in rows
                ),
                cfg.extraction,
            )

        assert made(kept.to_pylist()) == made(mentions.to_pylist())


def test_no_mentions_and_all_known_endpoints() -> None:
    cfg = HxdConfig()
    table = extractions_to_table([Extraction("c1", (EntityMention("Ada", "person", "d", "c1"),))])
    assert naming_unknown(ExplodeRelationMentions(cfg)(table), {"ada"}).num_rows == 0
    both = extractions_to_table(
        [
            Extraction(
                "c1",
                (EntityMention("Ada", "person", "d", "c1"), EntityMention("Alan", "person", "d", "c1")),
                (RelationMention("Ada", "Alan", "r", (), 1.0, "c1"),),
            )
        ]
    )
    assert naming_unknown(ExplodeRelationMentions(cfg)(both), {"ada", "alan"}).num_rows == 0
    assert naming_unknown(ExplodeRelationMentions(cfg)(both), {"ada"}).num_rows == 1
