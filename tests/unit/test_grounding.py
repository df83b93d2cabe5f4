"""extraction.grounding: entity names must occur in their chunk, relations must join such names, and the
prompt's own example names never pass."""

from __future__ import annotations

from hxd2_ray.config import ExtractionConfig, load_config
from hxd2_ray.extraction.extractor import Extractor
from hxd2_ray.extraction.grounding import Grounding, example_names, normalise
from hxd2_ray.extraction.prompts import load_prompts
from hxd2_ray.llm.scripted import ScriptedLLM
from hxd2_ray.types import Chunk, EntityMention, RelationMention

PROMPTS = load_prompts()
TEXT = "In 1820 the Ｒｉｖｅｒ  Thames froze;\nLondon's frost fairs drew crowds of Londoners."


def _e(name: str) -> EntityMention:
    return EntityMention(name=name, type="location", description="", chunk_id="c")


def _r(source: str, target: str) -> RelationMention:
    return RelationMention(source=source, target=target, description="", keywords=(), strength=1.0, chunk_id="c")


def _grounding(mode: str, score: float = 88.0) -> Grounding:
    return Grounding(ExtractionConfig(grounding=mode, grounding_min_score=score), PROMPTS)  # type: ignore[arg-type]


def test_normalise_folds_case_unicode_and_whitespace() -> None:
    assert normalise("  Ｒｉｖｅｒ\n\tTHAMES ") == "river thames"


def test_the_prompt_examples_are_found_in_every_format() -> None:
    names = example_names(PROMPTS)
    assert {"halden institute", "rachel osei", "kelp protection act", "bergen"} <= names


def test_strict_keeps_names_that_occur_normalised() -> None:
    g = _grounding("strict")
    kept = g.ground(TEXT, [_e("river thames"), _e("LONDON"), _e("Paris"), _e("frost fair")], [])
    assert [e.name for e in kept.entities] == ["river thames", "LONDON", "frost fair"]
    assert kept.ungrounded_entities == 1


def test_fuzzy_accepts_inflections_that_strict_refuses() -> None:
    entities = [_e("London frost fairs"), _e("frozen Seine")]
    assert _grounding("strict").ground(TEXT, entities, []).entities == ()
    fuzzy = _grounding("fuzzy").ground(TEXT, entities, [])
    assert [e.name for e in fuzzy.entities] == ["London frost fairs"]  # the text says "London's frost fairs"
    assert fuzzy.ungrounded_entities == 1


def test_a_relation_needs_both_ends_grounded() -> None:
    kept = _grounding("strict").ground(
        TEXT,
        [_e("London"), _e("River Thames")],
        [_r("London", "River Thames"), _r("London", "Paris"), _r("Mars", "Venus")],
    )
    assert [(r.source, r.target) for r in kept.relations] == [("London", "River Thames")]
    assert kept.ungrounded_relations == 2


def test_example_names_never_pass_fuzzily_but_do_when_the_chunk_names_them() -> None:
    g = _grounding("fuzzy", score=60)
    text = "The Halden Institutes of Norway and Bergen."
    kept = g.ground(text, [_e("Halden Institute"), _e("Rachel Osei"), _e("Bergen")], [])
    # "Halden Institute" occurs as written (strict) and stays; Rachel Osei is the example's own copy
    assert [e.name for e in kept.entities] == ["Halden Institute", "Bergen"]
    assert g.ground("A note on Rachel Ose.", [_e("Rachel Osei")], []).entities == ()


def test_off_keeps_everything() -> None:
    kept = _grounding("off").ground(TEXT, [_e("Rachel Osei")], [_r("Mars", "Venus")])
    assert len(kept.entities) == 1 and len(kept.relations) == 1 and kept.ungrounded_entities == 0


def test_the_extractor_drops_and_counts_ungrounded_records() -> None:
    reply = (
        '{"entities": [{"name": "Rachel Osei", "type": "person", "description": "copied"},'
        ' {"name": "Ada Lovelace", "type": "person", "description": "real"}],'
        ' "relations": [{"source": "Rachel Osei", "target": "Ada Lovelace", "description": "x",'
        ' "keywords": ["k"], "strength": 1}], "content_keywords": []}'
    )
    chunk = Chunk(id="c0", doc_id="d", order=0, start=0, text="Ada Lovelace wrote the first program.")
    (ext,) = Extractor(ScriptedLLM([reply]), ExtractionConfig(max_gleaning=0), PROMPTS).extract([chunk])
    assert [e.name for e in ext.entities] == ["Ada Lovelace"] and ext.relations == ()
    assert (ext.ungrounded_entities, ext.ungrounded_relations) == (1, 1)


def test_the_grounding_settings_are_part_of_the_index_fingerprint() -> None:
    fingerprints = {
        load_config(None, [f"extraction.grounding={mode}"]).index_fingerprint("v1")
        for mode in ("strict", "fuzzy", "off")
    }
    fingerprints.add(load_config(None, ["extraction.grounding_min_score=95"]).index_fingerprint("v1"))
    assert len(fingerprints) == 4
