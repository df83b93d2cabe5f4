"""The ``ppr`` chunk ranking: seeds and their weights, the dense floor (dense never lost), the trace, the fallback
when the graph is not resident, the reranker before the budget, and the entities a question names."""

from __future__ import annotations

import numpy as np
import pytest

from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.extraction.names import candidate_ngrams, named_entities
from hxd2_ray.rerank.overlap import OverlapReranker
from hxd2_ray.retrieval import QueryPipeline, open_index
from hxd2_ray.retrieval.ranking import (
    ChunkCandidate,
    RankedMatch,
    calibrated_chunks,
    dense_first,
    dense_probabilities,
    walk_seeds,
)
from hxd2_ray.retrieval.results import ChannelHit
from tests.unit.retrieval_fixtures import DIM, build_tiny_index, key, keyword_reply, scripted_llm

SUDHOF, STANFORD, NOBEL, KOBILKA = (
    key(n) for n in ("Thomas Südhof", "Stanford University", "Nobel Prize", "Brian Kobilka")
)


# ------------------------------------------------------------------------------------------ pure parts


def test_dense_probability_is_the_softmax_at_the_embedders_temperature():
    p = dense_probabilities({"a": 0.6, "b": 0.5, "c": 0.5}, 0.05)
    assert sum(p.values()) == pytest.approx(1.0)
    assert p["a"] / p["b"] == pytest.approx(2.718281828**2)  # 0.1 apart at temperature 0.05: e^2
    assert p["b"] == p["c"] and dense_probabilities({}, 0.05) == {}


def _match(key_, score, channel="entity_name"):
    return RankedMatch(key=key_, score=score, hits=(ChannelHit(channel, "q", score),))


def test_walk_seeds_split_the_reset_mass_and_weigh_by_score_and_specificity():
    entities = [_match("a", 0.9), _match("b", 0.6)]
    relations = [_match(("b", "c"), 0.8, "relation_mix")]
    dense = {"c1": 0.75, "c2": 0.25}
    seeds = {(s.kind, s.key): s for s in walk_seeds(entities, relations, dense, dense_share=0.4)}
    assert sum(s.weight for s in seeds.values()) == pytest.approx(1.0)
    # entities: a 0.9, b max(0.6, 0.8) = 0.8, c 0.8 (endpoint) -> 0.6 of the mass in proportion
    assert seeds[("entity", "a")].weight == pytest.approx(0.6 * 0.9 / 2.5)
    assert seeds[("entity", "b")].score == 0.8 and "relation:relation_mix" in seeds[("entity", "b")].channels
    assert seeds[("chunk", "c1")].weight == pytest.approx(0.4 * 0.75)
    # node specificity: an entity mentioned by 4 chunks weighs a quarter
    spec = {s.key: s for s in walk_seeds(entities, [], {}, dense_share=0.4, chunk_counts={"a": 4, "b": 1})}
    assert spec["a"].weight == pytest.approx((0.9 / 4) / (0.9 / 4 + 0.6))
    # one side empty: the other takes all the mass
    only_dense = walk_seeds([], [], dense, dense_share=0.4)
    assert [round(s.weight, 6) for s in only_dense] == [0.75, 0.25]


def test_dense_floor_on_the_calibrated_scale():
    # The rule: rank by max(graph share, dense probability). A chunk the walk does not favour keeps its dense
    # probability; a graph chunk passes it only with more probability than that.
    dense = {"d1": 0.55, "d2": 0.30, "d3": 0.15}
    weak_graph = {"g1": 0.20, "d1": 0.30, "d2": 0.25}
    order = [row[0] for row in calibrated_chunks(weak_graph, dense, 10)]
    assert order[:2] == ["d1", "d2"]  # the question's two strongest dense chunks stay first
    strong_graph = {"g1": 0.40, "d1": 0.05}
    rows = calibrated_chunks(strong_graph, dense, 10)
    assert [r[0] for r in rows] == ["d1", "g1", "d2", "d3"]  # g1 (0.40) outranks d2 (0.30), not d1 (0.55)
    assert rows[1] == ("g1", 0.40, 0.0, 0.40)
    assert len(calibrated_chunks(strong_graph, dense, 2)) == 2


def test_dense_first_puts_the_best_hits_ahead_of_a_mention_order():
    cands = [ChunkCandidate(c, 0, None, 0.0, i) for i, c in enumerate(["m1", "m2", "d2", "m3", "d1"])]
    out = dense_first(cands, {"d1": 0.9, "d2": 0.8, "d9": 0.7}, 2)
    assert [c.id for c in out] == ["d1", "d2", "m1", "m2", "m3"]
    assert [c.id for c in dense_first(cands, {"d1": 0.9}, 0)] == [c.id for c in cands]


def test_question_ngrams_that_look_like_names():
    grams = dict(candidate_ngrams("How much taller is Qinghe 17 than its parent?"))
    assert "Qinghe 17" in grams and "Qinghe" in grams
    assert "17" not in grams and "parent" not in grams and "How" not in grams  # number, common noun, first word
    assert "film" not in dict(candidate_ngrams("Which film won?"))


# ------------------------------------------------------------------------------------------ pipeline


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_index(tmp_path_factory.mktemp("ppr") / "index")


@pytest.fixture(scope="module")
def index(tiny):
    idx = open_index(tiny.root, tiny.cfg)
    yield idx
    idx.close()


def _pipeline(index, tiny, llm, reranker=None, **retrieval):
    # Title seeds off unless a test turns them on: the tiny index's documents are titled by the people it names.
    cfg = tiny.cfg.retrieval.model_copy(update={"chunk_ranking": "ppr", "ppr_title_seeds": False, **retrieval})
    return QueryPipeline(index, llm, HashingEmbedder(dim=DIM), cfg, reranker=reranker)


def test_ppr_ranks_the_seed_entitys_chunks_and_traces_every_score(index, tiny):
    llm = scripted_llm(keyword_reply(["Brian Kobilka"], []))
    result = _pipeline(index, tiny, llm, similarity_threshold=0.99).retrieve("Who is Brian Kobilka?")
    assert result.ranking["chunk_ranking"] == "ppr"
    seeds = result.ranking["seeds"]
    assert [(s["kind"], s["key"]) for s in seeds] == [("entity", KOBILKA)]  # no chunk hit passes 0.99
    assert seeds[0]["weight"] == pytest.approx(1.0) and "entity_name" in seeds[0]["channels"]
    # Kobilka's own chunk first; then chunks two hops away through Stanford / the Nobel Prize
    assert result.chunks[0].id == "c4"
    assert {c.id for c in result.chunks} == {"c1", "c2", "c3", "c4"}
    shares = [c.graph_score for c in result.chunks]
    assert shares == sorted(shares, reverse=True) and sum(shares) == pytest.approx(1.0)
    trace = result.trace()
    first = trace["chunks"][0]
    assert (first["rank"], first["id"]) == (1, "c4")
    assert first["graph_score"] > 0 and first["rank_score"] == first["graph_score"]
    assert trace["ranking"]["walk"]["nodes"] >= 5 and trace["ranking"]["walk"]["iterations"] > 1


def test_ppr_keeps_a_strong_dense_chunk_above_weak_graph_evidence(index, tiny):
    # The keyword points at Kobilka (c4), and the reset mass is all on it (dense_share 0), so the walk favours
    # c4; but the question's own words are c3's: its dense probability (~1) keeps it first (the floor).
    question = "Robert Malenka studies synaptic transmission at Stanford University"
    llm = scripted_llm(keyword_reply(["Brian Kobilka"], []))
    p = _pipeline(index, tiny, llm, similarity_threshold=0.2, top_k_entities=1, top_k_relations=0, ppr_dense_share=0.0)
    result = p.retrieve(question)
    by_id = {c.id: c for c in result.chunks}
    assert [s["key"] for s in result.ranking["seeds"] if s["weight"] > 0] == [KOBILKA]
    assert by_id["c4"].graph_score > by_id["c3"].graph_score  # the graph alone would put c4 first
    assert result.chunks[0].id == "c3" and by_id["c3"].dense_score > 0.9
    assert by_id["c3"].rank_score == by_id["c3"].dense_score
    assert result.chunks[1].id == "c4" and by_id["c4"].rank_score == by_id["c4"].graph_score


def test_without_a_resident_graph_ppr_falls_back_to_fused_with_a_notice(tiny):
    cfg = tiny.cfg.model_copy(update={"retrieval": tiny.cfg.retrieval.model_copy(update={"resident_graph": "off"})})
    with open_index(tiny.root, cfg) as idx:
        llm = scripted_llm(keyword_reply(["Brian Kobilka"], []))
        result = _pipeline(idx, tiny, llm).retrieve("Who is Brian Kobilka?")
    assert result.ranking["chunk_ranking"] == "fused"
    assert any("ppr needs the graph's read structures" in n and "reindex-reads" in n for n in result.notices)


def test_reranker_reorders_the_top_candidates_before_the_budget(index, tiny):
    llm = scripted_llm(keyword_reply(["Brian Kobilka"], []))
    question = "Who won the Nobel Prize for synaptic transmission and neurexin?"
    plain = _pipeline(index, tiny, llm, similarity_threshold=0.99).retrieve(question)
    reranked = _pipeline(
        index, tiny, llm, reranker=OverlapReranker(), similarity_threshold=0.99, rerank_top_n=3
    ).retrieve(question)
    top3 = {c.id for c in plain.chunks[:3]}
    assert {c.id for c in reranked.chunks[:3]} == top3  # the same candidates, reordered
    scores = [c.rerank_score for c in reranked.chunks[:3]]
    assert scores == sorted(scores, reverse=True) and reranked.chunks[0].id == "c2"  # most question words
    assert all(c.rerank_score is None for c in reranked.chunks[3:])
    assert reranked.ranking["rerank"] == {"model": "word-overlap-v1", "top_n": 3}
    assert reranked.trace()["chunks"][0]["rerank_score"] == pytest.approx(scores[0])


def test_question_names_join_the_matches(index, tiny):
    # The keyword reply is useless; the question spells out "Brian Kobilka".
    llm = scripted_llm(keyword_reply(["Research affiliation"], ["Field of study"]))
    result = _pipeline(index, tiny, llm, similarity_threshold=0.99, question_names=True).retrieve(
        "Where does Brian Kobilka work?"
    )
    assert result.entities[0].key == KOBILKA
    assert [(h.channel, h.query, h.score) for h in result.entities[0].hits] == [("question:name", "Brian Kobilka", 1.0)]
    off = _pipeline(index, tiny, llm, similarity_threshold=0.99).retrieve("Where does Brian Kobilka work?")
    assert KOBILKA not in [e.key for e in off.entities]
    assert [m.key for m in named_entities("Where does brian KOBILKA work?", index.graph)] == [KOBILKA]


def test_keywords_copied_from_the_prompt_example_are_dropped(index, tiny):
    from hxd2_ray.retrieval.pipeline import drop_copied_keywords
    from hxd2_ray.retrieval.query_prompts import load_query_prompts
    from hxd2_ray.retrieval.results import Keywords

    prompts = load_query_prompts().for_language("en")
    copied = Keywords(low_level=("Rachel Osei", "Bergen", "Brian Kobilka"), high_level=("Field of study",))
    kept, dropped = drop_copied_keywords(copied, "Where does Brian Kobilka work?", prompts)
    assert dropped == ["Rachel Osei", "Bergen", "Field of study"]
    assert kept.low_level == ("Brian Kobilka",) and kept.high_level == ()
    # A keyword the question itself contains stays, even when the example has it too.
    assert drop_copied_keywords(Keywords(low_level=("Bergen",)), "Is Bergen rainy?", prompts)[1] == []
    llm = scripted_llm(keyword_reply(["Rachel Osei", "Halden Institute"], ["Research affiliation"]))
    pipeline = _pipeline(index, tiny, llm, drop_prompt_keywords=True, keyword_grounding="off")
    result = pipeline.retrieve("Who is Brian Kobilka?")
    assert result.keywords.empty and any("copied from the prompt's example" in n for n in result.notices)


def test_keywords_neither_the_question_nor_the_index_supports_are_dropped_and_traced(index, tiny):
    """Issue 40's trace: the small model's keywords for a question it could not parse were the prompt example's.
    A keyword is kept for a word it shares with the question or for naming an entity of the index."""
    reply = keyword_reply(
        ["Bergen Institute", "Bergen", "Thomas Sudhoff", "Kobilka"], ["Research affiliation", "Nobel prize"]
    )
    result = _pipeline(index, tiny, scripted_llm(reply)).retrieve("Which prize did Brian Kobilka win?")
    # "Kobilka" and "Nobel prize" share a word with the question; "Thomas Sudhoff" is a near-miss of an index name.
    assert result.keywords.low_level == ("Thomas Sudhoff", "Kobilka")
    assert result.keywords.high_level == ("Nobel prize",)
    assert result.keywords.dropped == ("Bergen Institute", "Bergen", "Research affiliation")
    assert result.trace()["keywords"]["dropped"] == ["Bergen Institute", "Bergen", "Research affiliation"]
    assert any("dropped 3 keywords" in n for n in result.notices)
    # The prompt's example is dropped even where it would name an index entity, unless the question asks it.
    example = _pipeline(index, tiny, scripted_llm(keyword_reply(["Rachel Osei"], []))).retrieve("Who is Rachel?")
    assert example.keywords.dropped == ("Rachel Osei",)
    off = _pipeline(index, tiny, scripted_llm(reply), keyword_grounding="off").retrieve("Which prize did Kobilka win?")
    assert off.keywords.dropped == () and "Bergen" in off.keywords.low_level


class _Names:
    """A graph stand-in: get_entities finds the keys it holds."""

    def __init__(self, keys):
        self.keys = set(keys)

    def get_entities(self, keys):
        return [{"key": k} for k in keys if k in self.keys]


def test_the_longest_name_wins_and_its_parts_name_nothing():
    graph = _Names({"tampa bay buccaneers", "tampa", "bay", "lee roy selmon", "selmon", "draft"})
    found = named_entities("how is Tampa Bay Buccaneers draft history and Lee Roy Selmon connected?", graph)
    assert [(m.text, m.key) for m in found] == [
        ("Tampa Bay Buccaneers", "tampa bay buccaneers"),
        ("Lee Roy Selmon", "lee roy selmon"),
    ]
    # without the longer name in the index, its parts are names of their own
    parts = named_entities("Is Tampa near the Bay?", _Names({"tampa", "bay"}))
    assert sorted(m.key for m in parts) == ["bay", "tampa"]


def test_entity_seeds_by_softmax_let_an_exact_name_outweigh_vague_matches():
    entities = [_match("named", 1.0, "question:name"), _match("vague1", 0.5), _match("vague2", 0.5)]
    seeds = {s.key: s.weight for s in walk_seeds(entities, [], {}, dense_share=0.5, temperature=0.05)}
    assert seeds["named"] / seeds["vague1"] == pytest.approx(np.exp(10))
    assert sum(seeds.values()) == pytest.approx(1.0)
    linear = {s.key: s.weight for s in walk_seeds(entities, [], {}, dense_share=0.5)}
    assert linear["named"] / linear["vague1"] == pytest.approx(2.0)


def test_a_named_document_title_seeds_its_chunks(index, tiny):
    from hxd2_ray.extraction.names import TitleIndex

    titles = TitleIndex([("Mark King (musician)", [3, 4]), ("Nick Hexum", [7]), ("", [9])])
    assert titles.chunks == {"mark king": [3, 4], "nick hexum": [7]}
    assert sorted(m.key for m in named_entities("Which singer is American, Mark King or Nick Hexum?", titles)) == [
        "mark king",
        "nick hexum",
    ]
    # The tiny index's documents are titled by person; keywords useless, no entity names matched.
    llm = scripted_llm(keyword_reply(["Research affiliation"], []))
    result = _pipeline(index, tiny, llm, similarity_threshold=0.99, fuzzy_limit=0, ppr_title_seeds=True).retrieve(
        "What did Brian Kobilka win?"
    )
    seeds = [(s["kind"], s["key"], s["channels"]) for s in result.ranking["seeds"]]
    assert seeds == [("chunk", "c4", ["question:title"])] and result.chunks[0].id == "c4"
    off = _pipeline(index, tiny, llm, similarity_threshold=0.99, fuzzy_limit=0)
    assert off.retrieve("What did Brian Kobilka win?").ranking["seeds"] == []


def test_ppr_ranks_at_any_size_limit_with_read_structures(tiny):
    # Issue 32: the size cap is gone for an index with read structures (every build writes them): the smallest
    # limit still maps them, and the trace says ppr ran.
    cfg = tiny.cfg.model_copy(
        update={"retrieval": tiny.cfg.retrieval.model_copy(update={"resident_graph_max_mb": 1, "chunk_ranking": "ppr"})}
    )
    with open_index(tiny.root, cfg) as idx:
        llm = scripted_llm(keyword_reply(["Brian Kobilka"], []))
        result = _pipeline(idx, tiny, llm).retrieve("Who is Brian Kobilka?")
    assert result.ranking["chunk_ranking"] == "ppr" and "notice" not in result.ranking
    assert result.ranking["seeds"] and result.chunks


def test_a_title_spelled_with_function_words_and_punctuation_is_one_name():
    # MetaQA's film titles typed without brackets: a capitalised function word at either end belongs to the title,
    # and so does punctuation right after it; the question's own function words stay out.
    titles = {"from up on poppy hill", "the harvey girls", "fired up!", "horton hears a who!", "o brother", "hill"}
    graph = _Names({*titles, "the director"})
    cases = {
        "which movies have the same screenwriter of From Up on Poppy Hill": "from up on poppy hill",
        "the films that share actors with the film The Harvey Girls were in which genres": "the harvey girls",
        "who starred movies for the director of Fired Up!": "fired up!",
        "which person wrote the movies directed by the director of Horton Hears a Who!": "horton hears a who!",
    }
    for question, title in cases.items():
        assert [m.key for m in named_entities(question, graph, max_words=10)][:1] == [title], question
    # two titles, one with the question's "!": the one that spells more of the question comes first
    both = named_entities("who acted in the movie Moulin Rouge!", _Names({"moulin rouge", "moulin rouge!"}))
    assert [(m.text, m.key) for m in both] == [("Moulin Rouge!", "moulin rouge!"), ("Moulin Rouge", "moulin rouge")]
    # lower-case function words at the edges are the question's: "the director of" names nothing
    assert named_entities("the director of which film", graph) == []
    # a capitalised first word of the question is sentence case, not a title's
    assert "The director" not in dict(candidate_ngrams("The director of Heat"))
