"""Logic-form executor on real Kùzu graphs: a MetaQA subset (1/2/3-hop fixture questions) and a hand-made
numeric graph (count/sum/compare/sort/filter/math); injection safety; entity linking; the verifier."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.evaluation.datasets import EvalItem, load_metaqa
from hxd2_ray.graph.kuzu_store import KuzuGraphStore
from hxd2_ray.graph.templates import LOGIC_TEMPLATES
from hxd2_ray.llm.base import LLMResponse
from hxd2_ray.llm.scripted import ScriptedLLM
from hxd2_ray.logic import EntityLinker, GraphQueries, LogicFormExecutor, PredicateMatcher
from hxd2_ray.logic.facts import edge_facts, parse_number
from hxd2_ray.logic.metaqa import (
    Triple,
    build_graph,
    load_kb_triples,
    read_triples,
    triples_to_tables,
)
from hxd2_ray.logic.plan import Plan
from hxd2_ray.logic.plan_validation import validate_plan
from hxd2_ray.logic.verifier import EvidenceVerifier, parse_verdict
from hxd2_ray.vectors.exact_index import ExactVectorIndex

# The shipped MetaQA slice (tests/data/eval/ATTRIBUTION.md): its kb.txt holds every triple of the 22 movies
# below, and {1,2,3}-hop/logic_cases.tsv the fixture questions the cases below use, copied unchanged from
# ../shared/data/metaqa/{h}-hop/fixture_dev_200_reachable.tsv.
METAQA = Path(__file__).resolve().parents[1] / "data" / "eval" / "metaqa"
KB = METAQA / "kb.txt"

# The movies around the topic entities of the fixture questions below (every movie on every hop, so the
# answers on this subset equal the answers on the full KB), 22 movies plus all of their triples.
MOVIES = [
    "A Walk Among the Tombstones",
    "Any Wednesday",
    "Brenda Starr",
    "Enid",
    "First Love",
    "Gomorrah",
    "Local Hero",
    "Millennium Actress",
    "Omagh",
    "Paprika",
    "Perfect Blue",
    "Reality",
    "Reuben, Reuben",
    "Silk",
    "The Heart Is a Lonely Hunter",
    "The Lookout",
    "The Public Eye",
    "The Red Violin",
    "Thirty Two Short Films About Glenn Gould",
    "Tokyo Godfathers",
    "Kes",
    "The Sicilian",
]

HOSTILE = [
    "x'}) MATCH (n) DETACH DELETE n //",
    'O\'Brien "x"',
    "back\\slash\\\\n",
    "') RETURN 1; MATCH (n) DELETE n; //",
    "emoji 😀🚀 and 中文",
    "multi\nline\r\nname\t",
    "MATCH RETURN CREATE $keys",
]

# Numeric facts as relations to value entities (the Entity table has no numeric columns).
RICE = [
    ("Zhefu 802", "has_parent", "Simei 2"),
    ("Zhefu 802", "height_cm", "85"),
    ("Zhefu 802", "spikelets_per_panicle", "85"),  # a second fact on the same pair: keywords are unioned
    ("Simei 2", "height_cm", "70"),
    ("Zhongzao 39", "height_cm", "95"),
    ("Zhongzao 39", "has_parent", "Zhongzao 22"),
    ("Zhongzao 39", "has_parent", "Jiazao 935"),
    ("Zhongzao 22", "height_cm", "90"),
    ("Jiazao 935", "height_cm", "85"),
    ("Jiahe 218", "height_cm", "102.5"),
    ("Zhefu 802", "variety_type", "early indica"),
    ("Simei 2", "variety_type", "early indica"),
    ("Zhongzao 39", "variety_type", "early indica"),
    ("Zhongzao 22", "variety_type", "early indica"),
    ("Jiazao 935", "variety_type", "early indica"),
    ("Jiahe 218", "variety_type", "japonica"),
]
RICE_TYPES = {
    "has_parent": "variety",
    "height_cm": "number",
    "spikelets_per_panicle": "number",
    "variety_type": "category",
}


# --------------------------------------------------------------------------------------- plan helpers


def R(s, p, o, alias, text="", **extra):
    return {"step": text, "action": {"op": "retrieval", "args": {"s": s, "p": p, "o": o, **extra}, "alias": alias}}


def S(op, args, alias=None, text=""):
    action = {"op": op, "args": args}
    if alias:
        action["alias"] = alias
    return {"step": text, "action": action}


def OUT(*aliases):
    return S("output", {"aliases": [f"${a}" for a in aliases]})


def plan_of(steps) -> Plan:
    plan = validate_plan(steps)
    assert isinstance(plan, Plan), plan
    return plan


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def metaqa_graph(tmp_path_factory):
    entities, relations = load_kb_triples(KB, subjects=MOVIES)
    path = tmp_path_factory.mktemp("metaqa") / "graph.kuzu"
    counts = build_graph(path, entities, relations)
    assert counts["entities"] == entities.num_rows and counts["relations"] == relations.num_rows
    store = KuzuGraphStore(path)
    yield store
    store.close()


@pytest.fixture(scope="module")
def rice_path(tmp_path_factory):
    entities, relations = triples_to_tables(
        RICE, subject_type="variety", object_types=RICE_TYPES, source_label="hand-made rice test graph"
    )
    path = tmp_path_factory.mktemp("rice") / "graph.kuzu"
    build_graph(path, entities, relations)
    return path


@pytest.fixture(scope="module")
def rice_graph(rice_path):
    store = KuzuGraphStore(rice_path)
    yield store
    store.close()


@pytest.fixture(scope="module")
def fixture_questions() -> dict[str, EvalItem]:
    out = {}
    for h in (1, 2, 3):
        for q in load_metaqa(METAQA / f"{h}-hop" / "logic_cases.tsv").items:
            out[q.meta["question_marked"]] = q
    return out


# --------------------------------------------------------------------------------- MetaQA questions

# (fixture question, scripted plan). Entity names come from the question's [brackets]; directions follow the
# KB ("movie --directed_by--> person"), so "films starred by X" is retrieval(s=null, p=starred_actors, o=X).
METAQA_CASES = [
    ("who directed [The Public Eye]", [R("The Public Eye", "directed_by", None, "d"), OUT("d")]),
    ("what movies did [Gerard McSorley] star in", [R(None, "starred_actors", "Gerard McSorley", "m"), OUT("m")]),
    (
        "who directed the films starred by [Denis Lawson]",
        [R(None, "starred_actors", "Denis Lawson", "m"), R("$m", "directed_by", None, "d"), OUT("d")],
    ),
    (
        "the director of [The Red Violin] also directed which films",
        [
            R("The Red Violin", "directed_by", None, "d"),
            R(None, "directed_by", "$d", "films", exclude=["The Red Violin"]),
            OUT("films"),
        ],
    ),
    (
        "which movies have the same director of [Perfect Blue]",
        [
            R("Perfect Blue", "directed_by", None, "d"),
            R(None, "directed_by", "$d", "films", exclude=["Perfect Blue"]),
            OUT("films"),
        ],
    ),
    (
        "the movies that share directors with the movie [The Heart Is a Lonely Hunter] were released in which years",
        [
            R("The Heart Is a Lonely Hunter", "directed_by", None, "d"),
            R(None, "directed_by", "$d", "films", exclude=["The Heart Is a Lonely Hunter"]),
            R("$films", "release_year", None, "years"),
            OUT("years"),
        ],
    ),
    (
        "what genres are the films directed by the [The Lookout] director",
        [
            R("The Lookout", "directed_by", None, "d"),
            R(None, "directed_by", "$d", "films", exclude=["The Lookout"]),
            R("$films", "has_genre", None, "genres"),
            OUT("genres"),
        ],
    ),
    (
        "what types are the films directed by the director of [Gomorrah]",
        [
            R("Gomorrah", "directed_by", None, "d"),
            R(None, "directed_by", "$d", "films", exclude=["Gomorrah"]),
            R("$films", "has_genre", None, "genres"),
            OUT("genres"),
        ],
    ),
]


@pytest.mark.parametrize("question, steps", METAQA_CASES, ids=[c[0][:40] for c in METAQA_CASES])
def test_metaqa_fixture_questions(metaqa_graph, fixture_questions, question, steps):
    gold = fixture_questions[question]
    ev = LogicFormExecutor(metaqa_graph).execute(plan_of(steps), question)
    assert not ev.failed, ev.failure
    assert sorted(ev.answers) == sorted(gold.answers)
    # Every step ran fixed templates with bound parameters and left a trace.
    for st in ev.steps[:-1]:
        assert st.queries and all(q.template in LOGIC_TEMPLATES for q in st.queries)
        assert st.sub_answer and st.facts
    assert "--directed_by-->" in ev.format() or "--starred_actors-->" in ev.format()
    record = json.loads(json.dumps(ev.to_dict(), ensure_ascii=False))  # the trace is plain JSON
    assert record["steps"][0]["queries"][0]["template"] in LOGIC_TEMPLATES
    assert record["answers"] == ev.answers


def test_hops_cover_1_2_3(fixture_questions):
    hops = {fixture_questions[q].meta["hops"] for q, _ in METAQA_CASES}
    assert hops == {1, 2, 3}


def test_direction_is_honoured_and_relaxed_only_when_nothing_matches(metaqa_graph):
    ex = LogicFormExecutor(metaqa_graph)
    # Forward: the movie's director. The person is never the subject of directed_by.
    ev = ex.execute(plan_of([R("Local Hero", "directed_by", None, "d")]))
    assert ev.answers == ["Bill Forsyth"]
    assert not any("relaxed" in n for n in ev.steps[0].notes)
    # Asked the wrong way round: nothing has Bill Forsyth as subject, so the reverse is used and noted.
    ev = ex.execute(plan_of([R("Bill Forsyth", "directed_by", None, "m")]))
    assert "Local Hero" in ev.answers
    assert any("relaxed" in n for n in ev.steps[0].notes)
    strict = LogicFormExecutor(metaqa_graph, relax_direction=False)
    ev = strict.execute(plan_of([R("Bill Forsyth", "directed_by", None, "m")]))
    assert ev.failed and "no facts match" in ev.failure


def test_predicate_matching_is_fuzzy(metaqa_graph):
    ex = LogicFormExecutor(metaqa_graph)
    for p in ("director", "directed by", "Directed_By"):
        ev = ex.execute(plan_of([R("Perfect Blue", p, None, "d")]))
        assert ev.answers == ["Satoshi Kon"], p
    ev = ex.execute(plan_of([R("Perfect Blue", "screenplay budget", None, "d")]))
    assert ev.failed


def test_two_hop_lookup_and_relations_between(metaqa_graph):
    ex = LogicFormExecutor(metaqa_graph)
    ev = ex.execute(plan_of([R("Perfect Blue", "directed_by", None, "x", hops=2)]))
    assert {"Satoshi Kon", "Millennium Actress", "Paprika", "Tokyo Godfathers"} <= set(ev.answers)
    assert "Perfect Blue" not in ev.answers
    assert any(q.template == "lf_paths_2hop" for q in ev.steps[0].queries)
    # Both ends known: which relations connect them?
    ev = ex.execute(plan_of([R("A Walk Among the Tombstones", None, "Scott Frank", "rel")]))
    assert set(ev.answers) == {"directed_by", "written_by"}
    ev = ex.execute(plan_of([R("A Walk Among the Tombstones", "written_by", "Scott Frank", "rel")]))
    assert ev.answers == ["written_by"]


def test_count_over_metaqa(metaqa_graph):
    ev = LogicFormExecutor(metaqa_graph).execute(
        plan_of(
            [
                R("Perfect Blue", "directed_by", None, "d"),
                R(None, "directed_by", "$d", "films"),
                S("count", {"items": "$films"}, "n"),
                OUT("n"),
            ]
        )
    )
    assert ev.answers == ["4"]


def test_metaqa_loader_multi_edges_and_questions():
    triples = read_triples(KB, subjects=["A Walk Among the Tombstones"])
    assert triples and all(t.subject == "A Walk Among the Tombstones" for t in triples)
    _, relations = triples_to_tables(triples)
    row = next(r for r in relations.to_pylist() if r["target_key"] == "scott frank")
    assert row["keywords"] == ["directed_by", "written_by"]
    assert row["description"].splitlines() == [
        "A Walk Among the Tombstones --directed_by--> Scott Frank",
        "A Walk Among the Tombstones --written_by--> Scott Frank",
    ]
    assert row["weight"] == 2.0 and row["mention_count"] == 2
    # qa_dev.txt format (question TAB answers) with line-aligned qtypes from a separate file
    qs = load_metaqa(METAQA / "2-hop" / "qa_dev_head.txt", qtype_path=METAQA / "2-hop" / "qa_dev_head_qtype.txt")
    q0, q1 = qs.items[:2]
    assert q0.meta["hops"] == 2 and q0.meta["topic_entity"] == "Joel Zwick" and q0.answers == ("Greek",)
    assert "[" not in q0.question and q0.meta["qtype"] == "director_to_movie_to_language"
    assert q1.answers == ("1967", "1968") and q1.meta["qtype"] == "actor_to_movie_to_year"
    # fixture format (question TAB answers TAB qtype)
    fx = load_metaqa(METAQA / "3-hop" / "logic_cases.tsv").items
    assert len(fx) == 3 and all(q.meta["hops"] == 3 and q.meta["qtype"].count("_to_") == 3 for q in fx)


def test_triples_to_tables_direction_types_and_limits(tmp_path):
    triples = [
        Triple("Zeta Film", "directed_by", "Anna Berg"),  # subject key > object key: the pair is re-oriented
        Triple("Zeta Film", "written_by", "Anna Berg"),
        Triple("Zeta Film", "directed_by", "Anna Berg"),  # duplicate triple: counted once
        Triple("Zeta Film", "release_year", "1999"),
        Triple("Loop", "has_tags", "loop"),  # self-loop after normalisation: dropped
    ]
    entities, relations = triples_to_tables(triples)
    ents = {e["key"]: e for e in entities.to_pylist()}
    assert set(ents) == {"zeta film", "anna berg", "1999"}
    assert ents["zeta film"]["type"] == "movie" and ents["anna berg"]["type"] == "person"
    assert ents["1999"]["type"] == "year" and ents["zeta film"]["mention_count"] == 3
    rels = relations.to_pylist()
    pair = next(r for r in rels if r["keywords"] != ["release_year"])
    assert (pair["source_key"], pair["target_key"]) == ("anna berg", "zeta film")
    facts = edge_facts(
        pair["source_key"], "Anna Berg", pair["target_key"], "Zeta Film", pair["description"], pair["keywords"]
    )
    assert {(f.subject_name, f.predicate, f.object_name, f.directed) for f in facts} == {
        ("Zeta Film", "directed_by", "Anna Berg", True),
        ("Zeta Film", "written_by", "Anna Berg", True),
    }
    # limit_entities keeps a closed subgraph of at most N entities, in file order.
    kb = tmp_path / "kb.txt"
    kb.write_text("A|r|B\nA|r|C\nB|r|C\nD|r|A\n", encoding="utf-8")
    assert read_triples(kb, limit_entities=3) == [Triple("A", "r", "B"), Triple("A", "r", "C"), Triple("B", "r", "C")]
    ents, rels = load_kb_triples(kb, limit_entities=2)
    assert ents.num_rows == 2 and rels.num_rows == 1


def test_predicate_matcher_fuzzy_stems_and_vectors():
    m = PredicateMatcher()
    assert m.score("directed_by", "directed_by") == 100
    assert m.score("director", "directed_by") >= 90 and m.score("acted in", "starred_actors") >= 90
    assert m.score("written by", "directed_by") < m.cutoff
    with_vectors = PredicateMatcher(embedder=HashingEmbedder(dim=256))
    assert with_vectors.score("plant height", "height_cm") >= m.score("plant height", "height_cm")
    facts = edge_facts("a", "A", "b", "B", "A --directed_by--> B\nA --written_by--> B", ["directed_by", "written_by"])
    assert [f.predicate for f in m.select("director", facts)] == ["directed_by"]
    assert len(m.select(None, facts)) == 2


def test_edge_without_direction_lines_is_undirected():
    facts = edge_facts("a", "Alpha", "b", "Beta", "Alpha appears together with Beta.", ["co-occurrence"])
    assert len(facts) == 1 and not facts[0].directed and facts[0].predicate == "co-occurrence"
    # Arrow lines whose ends are not this edge's entities are not trusted.
    facts = edge_facts("a", "Alpha", "b", "Beta", "Gamma --rel--> Beta", ["rel"])
    assert not facts[0].directed


# ------------------------------------------------------------------------------ numeric operators


def run(graph, steps, **kw):
    return LogicFormExecutor(graph, **kw).execute(plan_of(steps))


def test_numeric_lookup_and_math(rice_graph):
    ev = run(
        rice_graph,
        [
            R("Zhefu 802", "has_parent", None, "parent"),
            R("Zhefu 802", "height_cm", None, "h1"),
            R("$parent", "height_cm", None, "h2"),
            S("math", {"expr": "$h1 - $h2"}, "diff"),
            OUT("diff"),
        ],
    )
    assert not ev.failed, ev.failure
    assert [s.sub_answer for s in ev.steps[:4]] == ["Simei 2", "85", "70", "15"]
    assert ev.answers == ["15"]
    assert "85 - 70 = 15" in ev.steps[3].facts


def test_seconds_are_read_from_the_injected_clock(rice_graph):
    readings: list[float] = []

    def clock() -> float:  # every reading is 0.25 s after the one before
        readings.append(len(readings) * 0.25)
        return readings[-1]

    ev = run(
        rice_graph, [R("Zhefu 802", "has_parent", None, "p"), R("$p", "height_cm", None, "h"), OUT("h")], clock=clock
    )
    assert ev.answers == ["70"]
    reads = [q for st in ev.steps for q in st.queries]
    assert len(reads) >= 3 and all(q.seconds == 0.25 for q in reads)  # one reading before and after each read
    assert ev.seconds == (len(readings) - 1) * 0.25  # the run's first and last readings bracket everything
    assert len(readings) == 2 * len(reads) + 2


def test_count_and_sum(rice_graph):
    ev = run(
        rice_graph,
        [
            R("Zhongzao 39", "has_parent", None, "parents"),
            S("count", {"items": "$parents"}, "n"),
            S("sum", {"items": "$parents", "p": "height_cm"}, "total"),
            OUT("n", "total"),
        ],
    )
    assert ev.answers == ["2", "175"]  # Zhongzao 22 (90) + Jiazao 935 (85)
    # Per-item sums keep multiplicity even when two items share the value entity "85".
    ev = run(
        rice_graph,
        [
            R(None, "variety_type", "early indica", "v"),
            S("sum", {"items": "$v", "p": "height_cm"}, "total"),
        ],
    )
    assert ev.answers == [str(85 + 70 + 95 + 90 + 85)]
    ev = run(
        rice_graph,
        [
            R("Zhefu 802", "height_cm", None, "h1"),
            R("Simei 2", "height_cm", None, "h2"),
            S("sum", {"values": ["$h1", "$h2", 10]}, "s"),
        ],
    )
    assert ev.answers == ["165"]


def test_compare(rice_graph):
    base = [
        R("Zhefu 802", "height_cm", None, "h1"),
        R("Jiazao 935", "height_cm", None, "h2"),
        R("Simei 2", "height_cm", None, "h3"),
    ]
    cases = [
        ("$h1", "$h3", "greater", "yes"),
        ("$h1", "$h3", "less", "no"),
        ("$h1", "$h2", "equal", "yes"),
        ("$h1", 85, "equal", "yes"),
        ("$h3", "70", "not_equal", "no"),
        ("$h1", "$h3", "greater_equal", "yes"),
    ]
    for left, right, op, expected in cases:
        ev = run(rice_graph, base + [S("compare", {"left": left, "right": right, "op": op}, "c")])
        assert ev.answers == [expected], (left, right, op)
    ev = run(
        rice_graph,
        [
            R("Zhefu 802", "has_parent", None, "p1"),
            R("Zhefu 802", "has_parent", None, "p2"),
            S("compare", {"left": "$p1", "right": "$p2", "op": "equal"}, "same"),
        ],
    )
    assert ev.answers == ["yes"]
    ev = run(
        rice_graph,
        [R("Zhefu 802", "has_parent", None, "p1"), S("compare", {"left": "$p1", "right": 3, "op": "greater"}, "c")],
    )
    assert ev.failed and "needs two numbers" in ev.failure


def test_sort_and_filter(rice_graph):
    early = R(None, "variety_type", "early indica", "v")
    ev = run(rice_graph, [early, S("sort", {"items": "$v", "p": "height_cm", "order": "desc", "limit": 2}, "top")])
    assert ev.answers == ["Zhongzao 39", "Zhongzao 22"]
    assert ev.steps[1].sub_answer == "Zhongzao 39 (95), Zhongzao 22 (90)"
    ev = run(rice_graph, [early, S("sort", {"items": "$v", "p": "height_cm", "order": "asc"}, "s")])
    assert ev.answers[0] == "Simei 2" and len(ev.answers) == 5
    ev = run(rice_graph, [early, S("filter", {"items": "$v", "p": "height_cm", "value": 84, "cmp": "gt"}, "tall")])
    assert ev.answers == ["Jiazao 935", "Zhefu 802", "Zhongzao 22", "Zhongzao 39"]
    ev = run(rice_graph, [early, S("filter", {"items": "$v", "p": "height_cm", "value": "85", "cmp": "eq"}, "f")])
    assert ev.answers == ["Jiazao 935", "Zhefu 802"]
    ev = run(rice_graph, [early, S("filter", {"items": "$v", "p": "has_parent", "value": None}, "with_parent")])
    assert ev.answers == ["Zhefu 802", "Zhongzao 39"]
    ev = run(
        rice_graph,
        [
            R("Zhongzao 39", "has_parent", None, "ps"),
            early,
            S("filter", {"items": "$v", "p": "has_parent", "value": "$ps", "cmp": "ne"}, "f"),
        ],
    )
    assert ev.answers == ["Jiazao 935", "Simei 2", "Zhefu 802", "Zhongzao 22"]  # not: Zhongzao 39
    # Sorting the numbers themselves (no attribute): the tallest height value.
    ev = run(
        rice_graph,
        [
            early,
            R("$v", "height_cm", None, "hs"),
            S("sort", {"items": "$hs", "p": None, "order": "desc", "limit": 1}, "max"),
        ],
    )
    assert ev.answers == ["95"]


def test_multi_edge_to_same_value_keeps_predicates_apart(rice_graph):
    ev = run(rice_graph, [R("Zhefu 802", "spikelets_per_panicle", None, "x")])
    assert ev.answers == ["85"] and ev.steps[0].facts == ["Zhefu 802 --spikelets_per_panicle--> 85"]
    ev = run(rice_graph, [R("Zhefu 802", None, "85", "rel")])
    assert set(ev.answers) == {"height_cm", "spikelets_per_panicle"}


def test_deduce_uses_the_llm_with_evidence(rice_graph):
    llm = ScriptedLLM(lambda req: "Zhongzao 39 is the tallest early indica variety.")
    ev = run(
        rice_graph,
        [
            R(None, "variety_type", "early indica", "v"),
            S("sort", {"items": "$v", "p": "height_cm", "order": "desc", "limit": 1}, "top"),
            S("deduce", {"question": "Which early indica variety is the tallest?", "inputs": ["$top"]}, "why"),
            OUT("why"),
        ],
        llm=llm,
    )
    assert not ev.failed
    assert ev.answers == ["Zhongzao 39 is the tallest early indica variety."]
    req = llm.requests[0]
    assert req.tag == "logic_deduce"
    assert "Zhongzao 39 (95)" in req.messages[-1]["content"]
    assert req.messages[-1]["content"].rstrip().endswith("Which early indica variety is the tallest?")
    assert ev.llm_calls == 1
    ev = run(rice_graph, [R("Zhefu 802", "height_cm", None, "h"), S("deduce", {}, "d")])
    assert ev.failed and "needs an LLM" in ev.failure


@pytest.mark.parametrize(
    "steps, words",
    [
        (
            [
                R("Zhefu 802", "height_cm", None, "h1"),
                R("Simei 2", "height_cm", None, "h2"),
                S("math", {"expr": "$h1 / ($h2 - 70)"}, "m"),
            ],
            "division by zero",
        ),
        (
            [R("Zhefu 802", "height_cm", None, "h"), S("math", {"expr": "$h ** 64 * $h ** 64 * $h ** 64"}, "m")],
            "overflow",
        ),
        ([R("No Such Variety", "height_cm", None, "h")], "no entity matches"),
        ([R("Zhefu 802", "has_parent", None, "p"), S("math", {"expr": "$p + 1"}, "m")], "not a number"),
        ([R(None, "variety_type", "early indica", "v"), S("math", {"expr": "$v + 1"}, "m")], "is not a number"),
        (
            [
                R(None, "variety_type", "early indica", "v"),
                R("$v", "height_cm", None, "hs"),
                S("math", {"expr": "$hs + 1"}, "m"),
            ],
            "expected one number, got 4",
        ),
        (
            [
                R(None, "variety_type", "early indica", "v"),
                S("sort", {"items": "$v", "p": "has_parent", "order": "asc"}, "s"),
            ],
            "no item has a numeric",
        ),
    ],
)
def test_step_errors_fail_the_evidence_with_a_reason(rice_graph, steps, words):
    ev = run(rice_graph, steps)
    assert ev.failed and words in ev.failure
    assert ev.steps[-1].error and not ev.answers


def test_empty_filter_output_fails_as_no_answer(rice_graph):
    ev = run(
        rice_graph,
        [
            R(None, "variety_type", "early indica", "v"),
            S("filter", {"items": "$v", "p": "height_cm", "value": 500, "cmp": "gt"}, "f"),
            S("count", {"items": "$f"}, "n"),
            OUT("f"),
        ],
    )
    assert ev.steps[2].sub_answer == "0"
    assert ev.failed and "no answer" in ev.failure


def test_parse_number():
    assert parse_number("85") == 85 and parse_number("102.5") == 102.5 and parse_number("-3") == -3
    assert parse_number("1,200") == 1200 and parse_number("85 cm") == 85 and parse_number("120天") == 120
    for text in ("12 Years a Slave", "bd-r", "", "Thor", "1e999", None, True):
        assert parse_number(text) is None


# ---------------------------------------------------------------------------------------- linking


def test_entity_linker_exact_fuzzy_vector(rice_graph):
    queries = GraphQueries(rice_graph)
    linker = EntityLinker(queries)
    assert linker.link("zhefu  802").method == "exact"
    assert linker.link("[Zhefu 802]").keys == ("zhefu 802",)  # MetaQA brackets are stripped
    hit = linker.link("Zhefu802")
    assert hit.method == "fuzzy" and hit.keys == ("zhefu 802",) and hit.score >= 90
    assert linker.link("Zhongzao").method == "none"  # ratio 80 < 90, and no vectors
    emb = HashingEmbedder(dim=256)
    keys = [r["key"] for r in queries.run_template("lf_entity_names", {"skip": 0, "limit": 1000})]
    names = [r["name"] for r in queries.run_template("lf_entity_names", {"skip": 0, "limit": 1000})]
    index = ExactVectorIndex(keys, emb.embed(names), family="entity_name")
    vlinker = EntityLinker(queries, embedder=emb, name_index=index, fuzzy_cutoff=101, vector_threshold=0.8)
    hit = vlinker.link("zhefu 802 rice")
    assert hit.method == "vector" and hit.keys == ("zhefu 802",)
    assert vlinker.link("completely unrelated words").method == "none"


def test_the_linker_reads_no_name_page_when_the_index_has_too_many_names(rice_graph):
    pages: list[dict] = []

    class CountingQueries(GraphQueries):
        def run_template(self, name, params):
            if name == "lf_entity_names":
                pages.append(dict(params))
            return super().run_template(name, params)

    queries = CountingQueries(rice_graph)
    big = EntityLinker(queries, entity_count=10_000_000, max_fuzzy_names=500_000)
    assert big.link("zhefu  802").method == "exact"  # keys still link
    assert big.link("Zhefu802").method == "none" and pages == []  # no fuzzy scan, and no page read to learn that
    small = EntityLinker(queries, entity_count=40, max_fuzzy_names=500_000)
    assert small.link("Zhefu802").method == "fuzzy" and len(pages) == 1


def test_linked_names_are_noted_in_the_step(rice_graph):
    ev = run(rice_graph, [R("Zhefu802", "height_cm", None, "h")])
    assert ev.answers == ["85"]
    assert any("fuzzy" in n for n in ev.steps[0].notes)


# -------------------------------------------------------------------------------------- injection


def _hostile_plans(h: str) -> list[list[dict]]:
    return [
        [R(h, "height_cm", None, "x")],
        [R(None, "height_cm", h, "x")],
        [R("Zhefu 802", h, None, "x")],
        [R("Zhefu 802", h, None, "x", hops=2)],
        [R("Zhefu 802", None, h, "x")],
        [R("Zhefu 802", "height_cm", None, "x", exclude=[h])],
        [R(None, "variety_type", "early indica", "v"), S("filter", {"items": "$v", "p": h, "value": h}, "f")],
        [
            R(None, "variety_type", "early indica", "v"),
            S("filter", {"items": "$v", "p": "variety_type", "value": h, "cmp": "contains"}, "f"),
        ],
        [R(None, "variety_type", "early indica", "v"), S("sort", {"items": "$v", "p": h, "order": "asc"}, "s")],
        [R(None, "variety_type", "early indica", "v"), S("sum", {"items": "$v", "p": h}, "s")],
        [S("compare", {"left": h, "right": h, "op": "equal"}, "c")],
    ]


def test_injection_strings_return_nothing_and_change_nothing(rice_path, tmp_path):
    # A writable connection, so a successful injection WOULD delete: the counts prove it did not.
    import shutil

    copy = tmp_path / "rw.kuzu"
    shutil.copy(rice_path, copy)
    store = KuzuGraphStore(copy, read_only=False)
    try:
        before = store.counts()
        assert before["entities"] > 0 and before["relations"] > 0
        ex = LogicFormExecutor(store)
        for h in HOSTILE:
            for steps in _hostile_plans(h):
                plan = validate_plan(steps)
                if not isinstance(plan, Plan):
                    continue  # rejected by validation (e.g. a "$keys"-looking literal): also safe
                ev = ex.execute(plan)
                for st in ev.steps:
                    assert all(q.template in LOGIC_TEMPLATES for q in st.queries)
                    assert not st.error.startswith("internal error"), st.error
                if steps[-1]["action"]["op"] in ("retrieval",) and len(steps) == 1:
                    exclude = steps[0]["action"]["args"].get("exclude")
                    if exclude:
                        assert ev.answers == ["85"]  # excluding an unknown name changes nothing
                    else:
                        assert ev.failed and not ev.answers, (h, steps)
                elif steps[-1]["action"]["op"] == "filter":
                    assert not ev.answers
                elif steps[-1]["action"]["op"] in ("sort", "sum"):
                    assert ev.failed
                assert store.counts() == before
        assert store.counts() == before
    finally:
        store.close()


# --------------------------------------------------------------------------------------- verifier


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("YES", True),
        ("yes.", True),
        ("Yes, because the evidence names the director.", True),
        ("是", True),
        ("no", False),
        ("maybe", False),
        ("", False),
        ("没有", False),
        ("否。", False),
        ("有", True),
        ("**NO**", False),
        ("The evidence lists the director.\nVerdict: yes", True),
        ("yesterday", False),
    ],
)
def test_verifier_yes_no(reply, expected):
    llm = ScriptedLLM([reply])
    evidence = "Local Hero --directed_by--> Bill Forsyth"
    verdict = EvidenceVerifier(llm, mode="pre").verify("who directed Local Hero?", evidence)
    assert verdict.supported is expected
    assert verdict.raw == reply
    req = llm.requests[0]
    assert req.choices == ("yes", "no") and req.tag == "logic_verify_pre"
    assert req.messages[-1]["content"].endswith("who directed Local Hero?")


def test_parse_verdict_none_for_unclear():
    assert parse_verdict("maybe") is None and parse_verdict("") is None and parse_verdict(None) is None


def test_verifier_post_check_and_errors(rice_graph):
    ev = run(rice_graph, [R("Zhefu 802", "height_cm", None, "h"), OUT("h")])
    llm = ScriptedLLM(["是"])
    v = EvidenceVerifier(llm, mode="post").verify("浙辅802有多高？", ev, answer="85 厘米")
    assert v.supported and v.mode == "post"
    content = llm.requests[0].messages[-1]["content"]
    assert "85 厘米" in content and "Zhefu 802 --height_cm--> 85" in content
    assert llm.requests[0].messages[0]["content"].startswith("你是阅卷人")  # Chinese prompt for a Chinese question
    with pytest.raises(ValueError):
        EvidenceVerifier(llm, mode="post").request("q", "evidence")
    with pytest.raises(ValueError):
        EvidenceVerifier(llm, mode="sideways")  # type: ignore[arg-type]
    failing = ScriptedLLM(lambda req: LLMResponse("", error="backend down"))
    v = EvidenceVerifier(failing).verify("q", "e")
    assert not v.supported and "backend down" in v.reason
