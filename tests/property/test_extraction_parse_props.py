"""Properties of the extraction-reply parsers (``hxd2_ray/extraction/parse.py``): LLM output is untrusted text."""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.extraction.merge import normalize_name
from hxd2_ray.extraction.parse import ParsedRecords, parse_json, parse_reply, parse_tuples
from tests.property.strategies import any_text, hostile_text, is_valid_unicode, json_text, small_json

JSON_CFG = ExtractionConfig(output_format="json")
TUPLE_CFG = ExtractionConfig(output_format="tuples")


def _check_records(parsed: ParsedRecords, cfg: ExtractionConfig) -> None:
    """What the merge, the Arrow tables and Kùzu rely on, whatever the reply was."""
    assert isinstance(parsed, ParsedRecords) and parsed.malformed >= 0
    for e in parsed.entities:
        assert e.name and normalize_name(e.name), e
        assert e.type in cfg.entity_types or e.type == "unknown" or e.type, e
        assert "\n" not in e.description
        assert is_valid_unicode(e.name) and is_valid_unicode(e.description) and is_valid_unicode(e.type), e
    for r in parsed.relations:
        assert normalize_name(r.source) and normalize_name(r.target)
        assert normalize_name(r.source) != normalize_name(r.target), "a self-loop survived"
        assert isinstance(r.strength, float) and math.isfinite(r.strength)
        assert "\n" not in r.description
        assert all(k and is_valid_unicode(k) for k in r.keywords)
        assert is_valid_unicode(r.source) and is_valid_unicode(r.target) and is_valid_unicode(r.description)
    assert all(is_valid_unicode(k) for k in parsed.content_keywords)


@given(hostile_text)
def test_any_text_parses_without_raising(text):
    for cfg in (JSON_CFG, TUPLE_CFG):
        _check_records(parse_reply(text, "chunk-1", cfg), cfg)


@given(json_text())
def test_any_json_shape_parses_without_raising(text):
    _check_records(parse_json(text, "chunk-1", JSON_CFG), JSON_CFG)


record = st.fixed_dictionaries(
    {
        "entity_name": st.one_of(any_text(20), small_json),
        "entity_type": st.one_of(st.sampled_from(["person", "ORGANIZATION", "geo", ""]), small_json),
        "entity_description": st.one_of(any_text(40), small_json),
    }
)
relation = st.fixed_dictionaries(
    {
        "source": st.one_of(any_text(12), small_json),
        "target": st.one_of(any_text(12), small_json),
        "description": st.one_of(any_text(30), small_json),
        "keywords": st.one_of(st.lists(any_text(10), max_size=4), small_json),
        "strength": st.one_of(st.floats(), any_text(6), small_json),
    }
)


@given(st.lists(record, max_size=6), st.lists(relation, max_size=6))
def test_entity_and_relation_records_with_hostile_fields(entities, relations):
    text = json.dumps({"entities": entities, "relations": relations}, ensure_ascii=True)
    _check_records(parse_json(text, "chunk-1", JSON_CFG), JSON_CFG)


names = st.text(alphabet=st.characters(categories=["L", "N"]), min_size=1, max_size=12)


@given(st.lists(names, min_size=1, max_size=5, unique_by=normalize_name))
def test_well_formed_entities_come_back(entity_names):
    items = [{"entity_name": n, "entity_type": "person", "entity_description": f"about {n}"} for n in entity_names]
    parsed = parse_json(json.dumps({"entities": items, "relations": []}), "chunk-1", JSON_CFG)
    assert [e.name for e in parsed.entities] == entity_names and parsed.malformed == 0


@given(st.lists(st.tuples(names, names), min_size=1, max_size=4))
def test_well_formed_tuples_come_back(pairs):
    lines = [f'("relationship"<|>{a}<|>{b}<|>{a} meets {b}<|>meeting<|>5)' for a, b in pairs]
    parsed = parse_tuples("##".join(lines) + "<|COMPLETE|>", "chunk-1", TUPLE_CFG)
    kept = [(a, b) for a, b in pairs if normalize_name(a) != normalize_name(b)]
    assert [(r.source, r.target) for r in parsed.relations] == kept
