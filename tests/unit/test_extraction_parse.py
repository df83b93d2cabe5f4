"""Parsing LLM extraction replies: tolerant, counted, never raising."""

from __future__ import annotations

import json

import pytest

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.extraction.parse import (
    clean_name,
    load_json_lenient,
    parse_json,
    parse_reply,
    parse_tuples,
    resolve_entity_type,
)

CFG = ExtractionConfig()
JSON_CFG = ExtractionConfig(output_format="json")
TUPLES_CFG = ExtractionConfig(output_format="tuples")

CANONICAL = (
    '("entity"<|>Marie Curie<|>person<|>Marie Curie was a physicist.)##\n'
    '("entity"<|>Sorbonne<|>organization<|>A university in Paris.)##\n'
    '("relationship"<|>Marie Curie<|>Sorbonne<|>She taught at the Sorbonne.<|>teaching, career<|>8)##\n'
    '("content_keywords"<|>physics, radioactivity)<|COMPLETE|>'
)


def test_canonical_tuples():
    p = parse_tuples(CANONICAL, "c1", CFG)
    assert [(e.name, e.type, e.description, e.chunk_id) for e in p.entities] == [
        ("Marie Curie", "person", "Marie Curie was a physicist.", "c1"),
        ("Sorbonne", "organization", "A university in Paris.", "c1"),
    ]
    (r,) = p.relations
    assert (r.source, r.target, r.description, r.keywords, r.strength) == (
        "Marie Curie",
        "Sorbonne",
        "She taught at the Sorbonne.",
        ("teaching", "career"),
        8.0,
    )
    assert p.content_keywords == ("physics", "radioactivity")
    assert p.malformed == 0


# (reply, expected entity (name, type, description) list, expected relations (src, tgt, kw, strength), malformed)
TUPLE_CASES = [
    pytest.param('"entity"<|>Alice<|>person<|>A person', [("Alice", "person", "A person")], [], 0, id="no-parens"),
    pytest.param(
        '("entity" < | > "Alice" <|> "PERSON" <|> "A person")',
        [("Alice", "person", "A person")],
        [],
        0,
        id="spaced-delimiters-and-quotes",
    ),
    pytest.param(
        '("entity"<|>Alice<|>person<|>A person<|>extra<|>more)',
        [("Alice", "person", "A person")],
        [],
        0,
        id="extra-fields",
    ),
    pytest.param(
        '("entity"<|>Alice<|>person<|>Born in Paris (France))',
        [("Alice", "person", "Born in Paris (France)")],
        [],
        0,
        id="paren-in-description",
    ),
    pytest.param(
        '("entity"<|>Alice<|>person<|>Born in Paris (France)',
        [("Alice", "person", "Born in Paris (France)")],
        [],
        0,
        id="missing-closing-paren",
    ),
    pytest.param('1. ("entity"<|>Alice<|>person<|>x)', [("Alice", "person", "x")], [], 0, id="numbered"),
    pytest.param('("entity"<|>Alice)', [("Alice", "unknown", "")], [], 0, id="name-only"),
    pytest.param('("entity"<|><|>person<|>nameless)', [], [], 1, id="empty-name"),
    pytest.param('("entity"<|>"  "<|>person<|>blank)', [], [], 1, id="blank-name"),
    pytest.param('("widget"<|>Alice<|>person)', [], [], 1, id="unknown-record-kind"),
    pytest.param('("entity" Alice person)', [], [], 1, id="record-without-delimiter"),
    pytest.param("Here are the entities I found:\n```\n", [], [], 0, id="chatter-not-counted"),
    pytest.param(
        '("relationship"<|>A<|>B<|>d<|>kw<|>strong)', [], [("A", "B", ("kw",), 1.0)], 0, id="strength-not-a-number"
    ),
    pytest.param('("relationship"<|>A<|>B<|>d<|>kw<|>nan)', [], [("A", "B", ("kw",), 1.0)], 0, id="strength-nan"),
    pytest.param('("relationship"<|>A<|>B<|>d<|>kw)', [], [("A", "B", ("kw",), 1.0)], 0, id="strength-missing"),
    pytest.param('("relationship"<|>A<|>B<|>d<|>7)', [], [("A", "B", (), 7.0)], 0, id="keywords-missing"),
    pytest.param(
        '("relationship"<|>A<|>B<|><|>kw<|>2)', [], [("A", "B", ("kw",), 2.0)], 0, id="empty-description-kept"
    ),
    pytest.param(
        '("relationship"<|>A<|>B<|>d<|>k1，k2、k1<|>3<|>junk)',
        [],
        [("A", "B", ("k1", "k2"), 3.0)],
        0,
        id="cjk-keyword-separators-extra-field",
    ),
    pytest.param('("relationship"<|>Alice<|> ALICE <|>self<|>kw<|>3)', [], [], 1, id="self-loop-after-normalizing"),
    pytest.param('("relationship"<|>Ａｌｉｃｅ<|>alice<|>self<|>kw<|>3)', [], [], 1, id="self-loop-full-width"),
    pytest.param('("relationship"<|>Alice)', [], [], 1, id="relation-without-target"),
    pytest.param(
        '("entity"<|>A<|>person<|>x)("entity"<|>B<|>person<|>y)',
        [("A", "person", "x"), ("B", "person", "y")],
        [],
        0,
        id="glued-records",
    ),
    pytest.param(
        '("entity"<|>A<|>person<|>x)##("entity"<|>B<|>person<|>y)< | COMPLETE | >',
        [("A", "person", "x"), ("B", "person", "y")],
        [],
        0,
        id="spaced-completion",
    ),
    pytest.param(
        '("entity"<|>AT&amp;T<|>organization<|>a &lt;telecom&gt;)',
        [("AT&T", "organization", "a <telecom>")],
        [],
        0,
        id="html-unescape",
    ),
    pytest.param(
        '("entity"<|>Bad\x00Name\x07<|>person<|>x\x1by)',
        [("Bad Name", "person", "x y")],
        [],
        0,
        id="control-characters",
    ),
    pytest.param(
        '("实体"<|>林晓梅<|>人物<|>海洋生物学家)',
        [("林晓梅", "person", "海洋生物学家")],
        [],
        0,
        id="chinese-record-kind-and-type",
    ),
]


@pytest.mark.parametrize("reply,entities,relations,malformed", TUPLE_CASES)
def test_tuple_cases(reply, entities, relations, malformed):
    p = parse_tuples(reply, "c", CFG)
    assert [(e.name, e.type, e.description) for e in p.entities] == entities
    assert [(r.source, r.target, r.keywords, r.strength) for r in p.relations] == relations
    assert p.malformed == malformed


def test_malformed_records_are_counted_and_skipped():
    reply = "\n".join(
        [
            '("entity"<|>Good<|>person<|>fine)',
            '("entity"<|><|>person<|>no name)',
            '("bogus"<|>x)',
            '("relationship"<|>Good<|>good<|>self loop<|>k<|>1)',
            '("relationship"<|>Good<|>Other<|>ok<|>k<|>1)',
            "<|COMPLETE|>",
        ]
    )
    p = parse_tuples(reply, "c", CFG)
    assert [e.name for e in p.entities] == ["Good"]
    assert [(r.source, r.target) for r in p.relations] == [("Good", "Other")]
    assert p.malformed == 3


WEIRD_NAMES = [
    "MATCH (n) DETACH DELETE n",
    "Robert'); DROP TABLE students;--",
    'He said "hi"',
    "back\\slash",
    "🚀 Rocket Lab 👩‍🚀",
    "lower case stays",
    "MiXeD CaSe",
    "{entity_types}",
    "`backtick` name",
    "Jesus'",
]


@pytest.mark.parametrize("name", WEIRD_NAMES)
@pytest.mark.parametrize("fmt", ["tuples", "json"])
def test_weird_names_are_kept_verbatim(name, fmt):
    if fmt == "tuples":
        reply = f'("entity"<|>{name}<|>person<|>about it)##("relationship"<|>{name}<|>Other<|>d<|>k<|>2)<|COMPLETE|>'
        p = parse_tuples(reply, "c", CFG)
    else:
        reply = json.dumps(
            {
                "entities": [{"name": name, "type": "person", "description": "about it"}],
                "relations": [
                    {"source": name, "target": "Other", "description": "d", "keywords": ["k"], "strength": 2}
                ],
                "content_keywords": [],
            }
        )
        p = parse_json(reply, "c", CFG)
    assert [e.name for e in p.entities] == [name]
    assert [r.source for r in p.relations] == [name]
    assert p.malformed == 0


@pytest.mark.parametrize(
    "raw,expected",
    [
        ('"Alice"', "Alice"),
        ("'Alice'", "Alice"),
        ("“Alice”", "Alice"),
        ('"Alice', "Alice"),
        ('Alice"', "Alice"),
        ('"The "Big" Apple"', 'The "Big" Apple'),
        ("  Alice \n", "Alice"),
        ("O'Brien", "O'Brien"),
    ],
)
def test_clean_name_strips_only_surrounding_quotes(raw, expected):
    assert clean_name(raw) == expected


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("person", "person"),
        ("PERSON", "person"),
        (" Person ", "person"),
        ("<organization>", "organization"),
        ("Organizations", "organization"),
        ("geo", "location"),
        ("人物", "person"),
        ("spaceship", "unknown"),
        ("", "unknown"),
    ],
)
def test_entity_type_maps_to_configured_or_unknown(raw, expected):
    assert resolve_entity_type(raw, CFG) == expected


def test_entity_type_uses_configured_spelling():
    cfg = ExtractionConfig(entity_types=("Person", "Spacecraft"))
    assert resolve_entity_type("PERSON", cfg) == "Person"
    assert resolve_entity_type("spacecraft", cfg) == "Spacecraft"
    # An alias only applies when its target type is configured.
    assert resolve_entity_type("geo", cfg) == "unknown"


# ------------------------------------------------------------------------------------------------ json

GOOD_JSON = {
    "entities": [
        {"name": "Marie Curie", "type": "person", "description": "A physicist."},
        {"name": "Sorbonne", "type": "organization", "description": "A university."},
    ],
    "relations": [
        {
            "source": "Marie Curie",
            "target": "Sorbonne",
            "description": "Taught there.",
            "keywords": ["teaching"],
            "strength": 8,
        },
    ],
    "content_keywords": ["physics", "radioactivity"],
}


def test_valid_json():
    p = parse_json(json.dumps(GOOD_JSON), "c1", CFG)
    assert [e.name for e in p.entities] == ["Marie Curie", "Sorbonne"]
    assert [(r.source, r.target, r.keywords, r.strength) for r in p.relations] == [
        ("Marie Curie", "Sorbonne", ("teaching",), 8.0)
    ]
    assert p.content_keywords == ("physics", "radioactivity")
    assert p.malformed == 0


def test_absurd_strengths_fall_back_to_one():
    p = parse_json('{"relations": [{"source": "A", "target": "B", "strength": 1' + "0" * 400 + "}]}", "c", CFG)
    assert [r.strength for r in p.relations] == [1.0]
    p = parse_json(
        '{"relations": [{"source": "A", "target": "B", "strength": 1e999}], "content_keywords": [" \\"x\\" ", "", 5]}',
        "c",
        CFG,
    )
    assert [r.strength for r in p.relations] == [1.0]
    assert p.content_keywords == ("x", "5")


def test_json_inside_code_fence_and_chatter():
    reply = "Sure! Here is the JSON:\n```json\n" + json.dumps(GOOD_JSON, indent=2) + "\n```\nHope this helps."
    p = parse_json(reply, "c", CFG)
    assert len(p.entities) == 2 and len(p.relations) == 1 and p.malformed == 0


def test_truncated_json_mid_entity_keeps_complete_objects():
    full = json.dumps(GOOD_JSON)
    cut = full[: full.index('"Sorbonne", "type"') + 12]  # max_tokens hit inside the second entity
    p = parse_json(cut, "c", CFG)
    assert [e.name for e in p.entities] == ["Marie Curie"]
    assert p.relations == () and p.malformed == 0


def test_truncated_json_mid_relations_and_keywords():
    full = json.dumps(GOOD_JSON)
    p = parse_json(full[: full.index('"Taught')], "c", CFG)
    assert [e.name for e in p.entities] == ["Marie Curie", "Sorbonne"]
    assert p.relations == ()  # the cut relation is incomplete, so it is not recovered
    p = parse_json(full[: full.index('"radioactivity"') + 5], "c", CFG)
    assert len(p.relations) == 1
    assert p.content_keywords == ("physics",)


def test_json_items_lacking_required_fields_are_malformed():
    reply = json.dumps(
        {
            "entities": [
                {"type": "person", "description": "no name"},
                "just a string",
                {"name": "Ok"},
                {"name": {"nested": 1}},
            ],
            "relations": [
                {"source": "Ok", "description": "no target"},
                {"source": "Ok", "target": "ok"},
                {"source": "Ok", "target": "Other", "keywords": "a, b", "strength": "7"},
                {"source": "Ok", "target": "Third", "strength": True},
            ],
            "content_keywords": "x, y",
        }
    )
    p = parse_json(reply, "c", CFG)
    assert [(e.name, e.type, e.description) for e in p.entities] == [("Ok", "unknown", "")]
    assert [(r.target, r.keywords, r.strength) for r in p.relations] == [("Other", ("a", "b"), 7.0), ("Third", (), 1.0)]
    assert p.content_keywords == ("x", "y")
    assert p.malformed == 5  # no name, string item, object name, no target, self loop


def test_json_variants():
    # A bare list, alternative key names, a tuple-format answer to a json prompt, two objects back to back.
    p = parse_json('[{"name": "A", "type": "person"}, {"source": "A", "target": "B"}]', "c", CFG)
    assert [e.name for e in p.entities] == ["A"] and [r.target for r in p.relations] == ["B"]
    p = parse_json(
        '{"entities": [{"entity_name": "A", "entity_type": "geo"}], "relationships": '
        '[{"src_id": "A", "tgt_id": "B", "weight": 3}]}',
        "c",
        CFG,
    )
    assert [(e.name, e.type) for e in p.entities] == [("A", "location")]
    assert [r.strength for r in p.relations] == [3.0]
    p = parse_json('("entity"<|>A<|>person<|>x)<|COMPLETE|>', "c", CFG)
    assert [e.name for e in p.entities] == ["A"]
    p = parse_json('{"entities": [{"name": "A"}]} {"entities": [{"name": "B"}]}', "c", CFG)
    assert [e.name for e in p.entities] == ["A"]
    p = parse_json('{"entities": {"name": "A"}}', "c", CFG)
    assert p.entities == () and p.malformed == 1


GARBAGE = [
    "",
    "   ",
    "no",
    "{",
    "}",
    "[",
    "]",
    '"',
    "<|>",
    "##",
    "<|COMPLETE|>",
    "(((",
    ")))",
    "\x00\x01\x02",
    '{"entities": [',
    '{"entities": [{"name": "A", "type": "per',
    '{"a": "\\',
    "[" * 5000,
    "{" * 5000 + "}" * 5000,
    "[" * 3000 + "]" * 3000,
    '("entity"<|>',
    '("relationship"<|>A',
    "🙂" * 100,
    "null",
    "42",
    "true",
    '"just a string"',
    '{"entities": null, "relations": 7}',
    "\ud800 lone surrogate",
    "<|><|><|><|>",
    "##" * 1000,
    '{"relations": [{"source": "A", "target": "B", "strength": 1' + "0" * 400 + "}]}",
    '("relationship"<|>A<|>B<|>d<|>k<|>1' + "0" * 400 + ")",
]


@pytest.mark.parametrize("text", GARBAGE)
@pytest.mark.parametrize("cfg", [JSON_CFG, TUPLES_CFG], ids=["json", "tuples"])
def test_garbage_never_raises(text, cfg):
    p = parse_reply(text, "c", cfg)
    assert p.malformed >= 0
    for e in p.entities:
        assert e.name.strip()
    for r in p.relations:
        assert r.source.strip() and r.target.strip()


def test_garbage_yields_no_records():
    for text in GARBAGE[:-2]:  # the last two are valid records with absurd strengths
        for parse in (parse_json, parse_tuples):
            p = parse(text, "c", CFG)
            assert p.entities == () and p.relations == (), (parse.__name__, text[:40])


def test_load_json_lenient_returns_none_for_nothing():
    assert load_json_lenient("") is None
    assert load_json_lenient("no json here") is None
    assert load_json_lenient('{"a": ["x", "y') == {"a": ["x"]}
