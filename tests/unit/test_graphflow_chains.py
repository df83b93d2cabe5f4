"""Relation-chain demonstrations on a hand-made movie graph: fits, the chain a question's wording agrees on,
demonstrations along it, multi-label edges, and the frontier cap."""

from __future__ import annotations

import numpy as np
import pytest

from hxd2_ray.graphflow.chains import STOP, ChainDemonstrations
from hxd2_ray.graphflow.trajectories import STOP as TRAJECTORY_STOP
from hxd2_ray.graphflow.trajectories import walk_nodes
from hxd2_ray.graphflow.walk_graph import WalkGraph

KEYS = ["f1", "f2", "f3", "f4", "f5", "d1", "d2", "en", "fr", "de"]
F1, F2, F3, F4, F5, D1, D2, EN, FR, DE = range(len(KEYS))  # f5: no director in this KB
DIRECTED = (("directed by", "out"),)
DIRECTED_IN = (("directed by", "in"),)
DIRECTED_WROTE = (("directed by", "out"), ("written by", "out"))  # d1 directed and wrote f2
DIRECTED_WROTE_IN = (("directed by", "in"), ("written by", "in"))
LANGUAGE = (("in language", "out"),)
LANGUAGE_IN = (("in language", "in"),)


def movies() -> WalkGraph:
    edges = []
    for film, director, sig, back in (
        (F1, D1, DIRECTED, DIRECTED_IN),
        (F2, D1, DIRECTED_WROTE, DIRECTED_WROTE_IN),
        (F3, D2, DIRECTED, DIRECTED_IN),
        (F4, D2, DIRECTED, DIRECTED_IN),
    ):
        edges += [(film, director, sig), (director, film, back)]
    for film, language in ((F1, EN), (F2, EN), (F3, DE), (F4, FR), (F5, EN)):
        edges += [(film, language, LANGUAGE), (language, film, LANGUAGE_IN)]
    return WalkGraph.from_edges(KEYS, edges)


@pytest.fixture()
def chains() -> ChainDemonstrations:
    return ChainDemonstrations(movies(), max_steps=3)


def named(chains: ChainDemonstrations, fits: dict) -> dict[str, float]:
    return {chains.chain_name(c): round(f.f1, 3) for c, f in fits.items()}


def test_a_chain_is_scored_by_the_f1_of_what_it_reaches(chains):
    assert STOP == TRAJECTORY_STOP
    # "the languages of the films whose director also directed f3": de and fr (f3's own language is de)
    fits = named(chains, chains.fits([F3], frozenset({DE, FR})))
    assert fits["in language"] == pytest.approx(2 / 3, abs=1e-3)  # reaches de only
    assert fits["directed by > <-directed by > in language"] == 1.0
    # through the language back to films and their languages: de again (f3 is the start, never an answer)
    assert fits["in language > <-in language > in language"] == pytest.approx(2 / 3, abs=1e-3)
    assert all(f > 0 for f in fits.values())  # only chains that reach an answer are listed


def test_questions_asked_in_the_same_words_share_the_chain_their_fits_agree_on(chains):
    # f1's answer (en) is also its own language: alone, the one-move shortcut ties the real chain and wins
    fits = [chains.fits([F1], frozenset({EN})), chains.fits([F3], frozenset({DE, FR}))]
    alone = chains.choose(fits, ["q1", "q2"])
    assert [chains.chain_name(c) for c in alone] == ["in language", "directed by > <-directed by > in language"]
    together = chains.choose(fits, ["languages of films sharing a director with X"] * 2)
    assert [chains.chain_name(c) for c in together] == ["directed by > <-directed by > in language"] * 2


def test_a_question_its_wordings_chain_does_not_answer_is_not_taught(chains):
    wording = ["languages of films sharing a director with X"] * 4
    # f5 has no director here: whatever reaches "its" answer en (its own language) is a coincidence
    fits = [
        chains.fits([F1], frozenset({EN})),
        chains.fits([F3], frozenset({DE, FR})),
        chains.fits([F4], frozenset({DE, FR})),
        chains.fits([F5], frozenset({EN})),
    ]
    assert named(chains, fits[3])["in language"] == 1.0
    # the shortcut fits better in sum (1 + 2/3 + 2/3 + 1 against 3), but only the chain fits three of them best
    chosen = chains.choose(fits, wording)
    assert chosen[3] is None and chains.chain_name(chosen[0]) == "directed by > <-directed by > in language"
    assert chosen[0] == chosen[1] == chosen[2]
    assert chains.choose([{}], ["alone"]) == [None]


def test_demonstrations_follow_the_chain_to_an_answer(chains):
    graph = chains.graph
    chain = next(
        c
        for c in chains.fits([F3], frozenset({DE, FR}))
        if chains.chain_name(c) == "directed by > <-directed by > in language"
    )
    demos = chains.sample(F3, chain, frozenset({DE, FR}), 40, np.random.default_rng(0))
    assert len(demos) == 40 and all(d[-1] == STOP and len(d) == 4 for d in demos)
    paths = {tuple(walk_nodes(graph, F3, d)) for d in demos}
    assert paths == {(F3, D2, F3, DE), (F3, D2, F4, FR)}  # both answers, each by its one path
    assert chains.sample(F3, chain, frozenset({EN}), 5, np.random.default_rng(0)) == []  # reaches no target


def test_an_edge_with_two_labels_can_be_followed_as_either(chains):
    fits = named(chains, chains.fits([F2], frozenset({D1})))
    assert fits["directed by"] == 1.0 and fits["written by"] == 1.0
    assert "written by" not in named(chains, chains.fits([F1], frozenset({D1})))  # d1 only directed f1


def test_a_frontier_over_the_cap_is_not_expanded():
    capped = ChainDemonstrations(movies(), max_steps=3, max_frontier=1)
    fits = named(capped, capped.fits([F3], frozenset({DE, FR})))
    # f3 -> d2 (1 node) -> f3, f4 (2 nodes: over the cap) stops there
    assert "directed by > <-directed by > in language" not in fits
    assert fits["in language"] == pytest.approx(2 / 3, abs=1e-3)


def test_without_return_to_start_no_walk_or_chain_comes_back_to_the_start():
    import torch

    from hxd2_ray.embedding.hashing import HashingEmbedder
    from hxd2_ray.graphflow.features import build_features
    from hxd2_ray.graphflow.inference import walk
    from hxd2_ray.graphflow.model import FeatureTables, GraphFlowModel

    graph = movies()
    feats = build_features(graph, HashingEmbedder(dim=16), KEYS, progress=None)
    tables = FeatureTables.from_features(feats)
    torch.manual_seed(0)
    model = GraphFlowModel(dim=16, question_dim=16, hidden=8, max_steps=3)
    q = torch.nn.functional.normalize(torch.randn(1, 16), dim=-1)
    qh = model.encode_question(q)

    def visits(return_to_start: bool) -> set[tuple[int, ...]]:
        outcome = walk(
            model, tables, qh, q, [[F3]], mode="beam", width=64, max_steps=3, return_to_start=return_to_start
        )[0]
        return {f.nodes for f in outcome.finished}

    assert any(F3 in nodes[1:] for nodes in visits(True))  # f3 -> d2 -> f3 -> ... is a walk
    assert not any(F3 in nodes[1:] for nodes in visits(False)) and visits(False)
    # the chains agree: through d2 only f4 (and its language) remain
    away = ChainDemonstrations(graph, max_steps=3, return_to_start=False)
    fits = named(away, away.fits([F3], frozenset({FR})))
    assert fits["directed by > <-directed by > in language"] == 1.0  # was 2/3: f3's own de is gone
    chain = next(c for c in away.fits([F3], frozenset({FR})) if len(c) == 3 and away.chain_name(c).startswith("dir"))
    demos = away.sample(F3, chain, frozenset({FR, DE}), 20, np.random.default_rng(0))
    assert {tuple(walk_nodes(graph, F3, d)) for d in demos} == {(F3, D2, F4, FR)}
