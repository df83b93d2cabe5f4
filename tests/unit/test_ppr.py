"""Personalized PageRank over entity and chunk nodes (hxd2_ray.retrieval.ppr) on hand-made graphs."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from hxd2_ray.retrieval.ppr import EdgeWeights, PropagationGraph


def _graph(n_ent, n_chunk, related=(), mentions=(), synonyms=(), weights=EdgeWeights()):
    rel = np.array(related, dtype=np.int64).reshape(-1, 2)
    men = np.array(mentions, dtype=np.int64).reshape(-1, 2)
    syn = np.array([s[:2] for s in synonyms], dtype=np.int64).reshape(-1, 2)
    score = np.array([s[2] for s in synonyms], dtype=np.float64)
    return PropagationGraph(
        n_ent,
        n_chunk,
        related=(rel[:, 0], rel[:, 1]),
        mentions=(men[:, 0], men[:, 1]),
        synonyms=(syn[:, 0], syn[:, 1], score),
        weights=weights,
    )


def _full(graph, seeds, weights, damping):
    return graph.personalized_pagerank(
        seeds, weights, damping=damping, radius=graph.size, max_nodes=graph.size, max_fanout=graph.size
    )


def test_two_nodes_closed_form():
    # entity 0 -- chunk 0; reset on the entity. x_e = (1-d) + d x_c, x_c = d x_e  =>  x_e = 1/(1+d), x_c = d/(1+d).
    g = _graph(1, 1, mentions=[(0, 0)])
    for d in (0.5, 0.85):
        res = _full(g, [0], [1.0], d)
        np.testing.assert_array_equal(res.nodes, [0, 1])
        np.testing.assert_allclose(res.scores, [1 / (1 + d), d / (1 + d)], atol=1e-10)


def test_star_closed_form():
    # An entity hub (node 0) mentioned by chunks c0..c2; reset on c0. By symmetry c1 = c2 = y; hub h; c0 = z:
    # z = (1-d) + d h/3;  h = d (z + 2y);  y = d h/3.
    g = _graph(1, 3, mentions=[(0, 0), (1, 0), (2, 0)])
    d = 0.5
    res = _full(g, [g.chunk_node([0])[0]], [1.0], d)
    a = np.array([[1, -d / 3, 0], [-d, 1, -2 * d], [0, -d / 3, 1]])  # unknowns z, h, y
    z, h, y = np.linalg.solve(a, [1 - d, 0, 0])
    np.testing.assert_allclose(res.scores, [h, z, y, y], atol=1e-10)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_networkx_pagerank(seed):
    rng = np.random.default_rng(seed)
    n_ent, n_chunk = 12, 9
    related = {tuple(sorted(rng.choice(n_ent, 2, replace=False))) for _ in range(14)}
    mentions = {(int(c), int(e)) for c, e in zip(rng.integers(0, n_chunk, 20), rng.integers(0, n_ent, 20))}
    synonyms = [(0, 5, 0.9), (3, 7, 0.8)]
    weights = EdgeWeights(mention=1.0, related=0.7, synonym=2.0)
    g = _graph(n_ent, n_chunk, sorted(related), sorted(mentions), synonyms, weights)
    reference = nx.Graph()
    reference.add_nodes_from(range(n_ent + n_chunk))  # isolated nodes are dangling: they keep what they get
    for a, b in related:
        reference.add_edge(int(a), int(b), weight=reference.get_edge_data(a, b, {"weight": 0})["weight"] + 0.7)
    for c, e in mentions:
        reference.add_edge(n_ent + c, e, weight=reference.get_edge_data(n_ent + c, e, {"weight": 0})["weight"] + 1.0)
    for a, b, s in synonyms:
        reference.add_edge(a, b, weight=reference.get_edge_data(a, b, {"weight": 0})["weight"] + 2.0 * s)
    seeds, seed_w = [1, 4, n_ent + 2], [0.5, 0.2, 0.3]
    res = _full(g, seeds, seed_w, 0.5)
    want = nx.pagerank(
        reference, alpha=0.5, personalization=dict(zip(seeds, seed_w)), weight="weight", tol=1e-13, max_iter=500
    )
    got = np.zeros(g.size)
    got[res.nodes] = res.scores
    got /= got.sum()  # networkx returns dangling mass to the reset vector; normalised, the two agree
    np.testing.assert_allclose(got, [want[i] for i in range(g.size)], atol=1e-8)


def test_local_walk_is_a_lower_bound_and_exact_when_closed():
    # A path of entities 0-1-2-3-4-5 with a chunk on each end; the local walk loses what leaves its 2-hop ball.
    g = _graph(6, 2, related=[(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)], mentions=[(0, 0), (1, 5)])
    full = _full(g, [0], [1.0], 0.5)
    local = g.personalized_pagerank([0], [1.0], damping=0.5, radius=2, max_nodes=100, max_fanout=100)
    np.testing.assert_array_equal(local.nodes, [0, 1, 2, 6])
    dense = np.zeros(g.size)
    dense[full.nodes] = full.scores
    assert np.all(local.scores <= dense[local.nodes] + 1e-12)
    assert local.scores.sum() < full.scores.sum()
    closed = g.personalized_pagerank([0], [1.0], damping=0.5, radius=10, max_nodes=100, max_fanout=100)
    np.testing.assert_allclose(closed.scores, full.scores, atol=1e-12)


def test_hubs_are_not_expanded_and_max_nodes_keeps_the_best_connected():
    # Entity 0 is mentioned by five chunks (a hub at max_fanout=3); entity 1 by one chunk.
    g = _graph(2, 6, mentions=[(0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (5, 1)], related=[(0, 1)])
    nodes = g.neighbourhood(np.array([1]), radius=3, max_nodes=100, max_fanout=3)
    # From entity 1: its chunk (7) and the hub (0); the hub is reached but never expanded.
    np.testing.assert_array_equal(nodes, [0, 1, 7])
    capped = g.neighbourhood(np.array([2 + 0, 2 + 1]), radius=1, max_nodes=3, max_fanout=10)
    # Seeds chunk 0 and chunk 1 both reach entity 0 (two edges into the frontier): it wins the one free place.
    np.testing.assert_array_equal(capped, [0, 2, 3])


def test_edge_weights_steer_the_walk():
    # Entity 0 reaches entity 1 by RELATED and entity 2 by SYNONYM (cosine 0.9); each has one chunk.
    mentions = [(0, 1), (1, 2)]
    base = _graph(3, 2, related=[(0, 1)], mentions=mentions, synonyms=[(0, 2, 0.9)])
    res = _full(base, [0], [1.0], 0.5)
    score = dict(zip(res.nodes.tolist(), res.scores.tolist()))
    assert score[3] > score[4]  # related weight 1 > synonym 0.9
    heavy = _graph(3, 2, related=[(0, 1)], mentions=mentions, synonyms=[(0, 2, 0.9)], weights=EdgeWeights(synonym=3.0))
    res = _full(heavy, [0], [1.0], 0.5)
    score = dict(zip(res.nodes.tolist(), res.scores.tolist()))
    assert score[4] > score[3]
    off = _graph(3, 2, related=[(0, 1)], mentions=mentions, synonyms=[(0, 2, 0.9)], weights=EdgeWeights(synonym=0))
    assert off.n_synonym_edges == 0 and 4 not in _full(off, [0], [1.0], 0.5).nodes


def test_bad_seeds_are_refused():
    g = _graph(1, 1, mentions=[(0, 0)])
    with pytest.raises(ValueError, match="damping"):
        g.personalized_pagerank([0], [1.0], damping=1.0)
    with pytest.raises(ValueError, match="seed node ids"):
        g.personalized_pagerank([5], [1.0])
    with pytest.raises(ValueError, match="non-negative"):
        g.personalized_pagerank([0], [-1.0])
    empty = g.personalized_pagerank([0], [0.0])
    assert len(empty.nodes) == 0 and empty.iterations == 0


def test_specificity_counts_self_loops_and_parallel_edges():
    g = _graph(2, 3, related=[(0, 0), (0, 1)], mentions=[(0, 0), (1, 0), (2, 1)], synonyms=[(0, 1, 0.5)])
    np.testing.assert_array_equal(g.entity_chunk_count, [2, 1])
    assert g.adjacency[0, 0] == 0  # self-loops carry nothing
    assert g.adjacency[0, 1] == g.adjacency[1, 0] == 1.5  # RELATED 1 + SYNONYM 0.5 on one pair add up


def test_mention_idf_sends_a_passage_on_through_its_rare_names():
    # Chunk 0 mentions entity 0 (also in chunks 1..3: common) and entity 1 (only here: rare).
    mentions = [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1)]
    plain = _graph(2, 4, mentions=mentions)
    idf = _graph(2, 4, mentions=mentions, weights=EdgeWeights(mention_idf=True))
    chunk0 = 2  # node id: after the two entities
    assert plain.adjacency[chunk0, 0] == plain.adjacency[chunk0, 1] == 1.0
    assert idf.adjacency[chunk0, 0] == pytest.approx(np.log1p(4 / 4))
    assert idf.adjacency[chunk0, 1] == pytest.approx(np.log1p(4))
    start = [chunk0]
    p, q = _full(plain, start, [1.0], 0.5), _full(idf, start, [1.0], 0.5)
    share = lambda r, node: r.scores[list(r.nodes).index(node)] / r.scores.sum()  # noqa: E731
    assert share(q, 1) > share(p, 1) and share(q, 0) < share(p, 0)


def test_title_nodes_sit_after_the_chunks_and_equal_networkx():
    # 2 entities, 3 chunks, 2 title nodes: chunk 0 -- title 0 -- chunk 1; chunk 2 -- title 1 -- chunk 1.
    titles = (np.array([0, 1, 2, 1]), np.array([0, 0, 1, 1]))
    g = PropagationGraph(
        2,
        3,
        related=(np.array([0]), np.array([1])),
        mentions=(np.array([0]), np.array([0])),
        titles=titles,
        n_titles=2,
        weights=EdgeWeights(title=2.0),
    )
    assert g.size == 7 and g.n_title_edges == 4
    assert g.is_chunk(np.arange(7)).tolist() == [False, False, True, True, True, False, False]
    reference = nx.Graph()
    reference.add_nodes_from(range(7))
    reference.add_edge(0, 1, weight=1.0)
    reference.add_edge(2, 0, weight=1.0)
    for c, t in zip(*titles):
        reference.add_edge(2 + int(c), 5 + int(t), weight=2.0)
    res = _full(g, [2], [1.0], 0.5)
    expected = nx.pagerank(reference, alpha=0.5, personalization={2: 1.0}, weight="weight", tol=1e-14, max_iter=500)
    np.testing.assert_allclose(res.scores / res.scores.sum(), [expected[n] for n in res.nodes], atol=1e-8)
    with pytest.raises(ValueError, match="title node ids"):
        PropagationGraph(
            1,
            1,
            related=(np.zeros(0), np.zeros(0)),
            mentions=(np.zeros(0), np.zeros(0)),
            titles=(np.array([0]), np.array([3])),
            n_titles=1,
        )
