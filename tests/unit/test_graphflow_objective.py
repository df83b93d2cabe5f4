"""GraphFlow's objective and walking machinery by hand: the detailed-balance loss on a three-node graph, its SFT
reduction, the STOP action (terminal flow tied to the reward, forced after max_steps), local candidates, and the
segment softmax / sampling helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hxd2_ray.graphflow.features import build_features
from hxd2_ray.graphflow.inference import walk
from hxd2_ray.graphflow.model import FeatureTables, GraphFlowModel
from hxd2_ray.graphflow.objective import dble_residuals, trajectory_loss
from hxd2_ray.graphflow.trajectories import PAD, STOP, ShortestPaths, Trajectory, local_candidates
from hxd2_ray.graphflow.walk_graph import WalkGraph
from hxd2_ray.graphflow.walker import flat_entries, sample_segments, segment_log_softmax

OUT = (("to", "out"),)
A, B, C = 0, 1, 2
MOVE_SCORE = {B: 1.0, C: 0.5}  # r(s, move to v), whatever the state
STOP_SCORE = {A: 0.2, B: -0.3, C: 0.0}  # r(s, STOP) at node u
FLOW = {A: 2.0, B: 1.0, C: 0.7}  # log F(s) of a state at node u
MISS = -5.0


def three_nodes() -> WalkGraph:
    # a -> b, a -> c, b -> c (entries 0, 1, 2 in this order)
    return WalkGraph.from_edges(["a", "b", "c"], [(A, B, OUT), (A, C, OUT), (B, C, OUT)])


class HandModel(GraphFlowModel):
    """Scores and flows read from the tables above: a state is encoded as the one-hot of its node."""

    def __init__(self) -> None:
        super().__init__(dim=4, question_dim=4, hidden=3, max_steps=2)

    def encode_question(self, q: torch.Tensor) -> torch.Tensor:
        return q

    def initial_path(self, t, qh, start):
        return torch.zeros((len(start), 3))

    def state_repr(self, t, g, qh, qfull, node, step):
        return torch.nn.functional.one_hot(node, 3).float() + 0 * g

    def action_repr(self, t, entries, question, qfull, on_path, is_start):
        return torch.nn.functional.one_hot(t.target_t[entries], 3).float()

    def move_scores(self, h, act, state_of):
        w = torch.tensor([0.0, MOVE_SCORE[B], MOVE_SCORE[C]])
        return (act * w).sum(-1) + 0 * h[state_of].sum(-1)

    def stop_score(self, h):
        return (h * torch.tensor([STOP_SCORE[A], STOP_SCORE[B], STOP_SCORE[C]])).sum(-1)

    def log_flow(self, h):
        return (h * torch.tensor([FLOW[A], FLOW[B], FLOW[C]])).sum(-1)

    def next_path(self, act, g):
        return g


def tables_of(graph: WalkGraph) -> FeatureTables:
    from hxd2_ray.embedding.hashing import HashingEmbedder

    return FeatureTables.from_features(build_features(graph, HashingEmbedder(dim=4), graph.keys, progress=None))


def lse(*xs: float) -> float:
    return math.log(sum(math.exp(x) for x in xs))


def test_residuals_in_log_space_by_hand():
    # log F(s) = 1, candidate scores (2, 0, -1), next flows (0.5, -3, 0), third slot empty
    scores = torch.tensor([[2.0, 0.0, -1.0, 9.0]])
    valid = torch.tensor([[True, True, True, False]])
    got = dble_residuals(torch.tensor([1.0]), scores, torch.tensor([[0.5, -3.0, 0.0, 0.0]]), valid)
    z = lse(2.0, 0.0, -1.0)  # the empty slot's 9.0 takes no part in the normalisation
    assert got[0].tolist() == pytest.approx([1 + 2 - z - 0.5, 1 + 0 - z + 3, 1 - 1 - z - 0, 0.0])


def trajectory_and_candidates() -> tuple[Trajectory, np.ndarray]:
    # a -(entry 0)-> b -(entry 2)-> c; c is reached by the 2nd move = max_steps, so STOP is forced, not decided
    traj = Trajectory(question=0, nodes=[A, B, C], actions=[0, 2], kind="demo", hit=True)
    cands = np.array([[0, STOP, 1], [2, STOP, PAD]])
    return traj, cands


def test_detailed_balance_loss_on_three_nodes_by_hand():
    graph = three_nodes()
    traj, cands = trajectory_and_candidates()
    q = torch.zeros((1, 4))
    loss, stats = trajectory_loss(
        HandModel(),
        tables_of(graph),
        q,
        q,
        [traj],
        [cands],
        [frozenset({C})],
        objective="db",
        miss_log_reward=MISS,
        max_steps=2,
    )
    # state 0 at a: candidates (a->b taken, STOP, a->c); moves lead to step 1 < max_steps: learned flows
    z0 = lse(MOVE_SCORE[B], STOP_SCORE[A], MOVE_SCORE[C])
    d0 = [
        FLOW[A] + MOVE_SCORE[B] - z0 - FLOW[B],
        FLOW[A] + STOP_SCORE[A] - z0 - MISS,  # STOP at a (not a target): the terminal flow is log R = MISS
        FLOW[A] + MOVE_SCORE[C] - z0 - FLOW[C],
    ]
    # state 1 at b: (b->c taken, STOP, empty); b->c is the max_steps-th move, so its flow is log R(c) = 0
    z1 = lse(MOVE_SCORE[C], STOP_SCORE[B])
    d1 = [FLOW[B] + MOVE_SCORE[C] - z1 - 0.0, FLOW[B] + STOP_SCORE[B] - z1 - MISS]
    expected = (sum(d * d for d in d0) + sum(d * d for d in d1)) / 2
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert stats.states == 2 and stats.transitions == 5 and stats.demo_states == 2
    assert stats.taken_best == 2  # a->b (1.0) beats STOP (0.2) and a->c (0.5); b->c (0.5) beats STOP (-0.3)


def test_a_move_cost_lowers_each_terminal_flow_by_the_moves_made():
    graph = three_nodes()
    traj, cands = trajectory_and_candidates()
    q = torch.zeros((1, 4))
    cost = 0.75
    loss, _ = trajectory_loss(
        HandModel(),
        tables_of(graph),
        q,
        q,
        [traj],
        [cands],
        [frozenset({C})],
        objective="db",
        miss_log_reward=MISS,
        max_steps=2,
        move_log_cost=cost,
    )
    z0 = lse(MOVE_SCORE[B], STOP_SCORE[A], MOVE_SCORE[C])
    d0 = [
        FLOW[A] + MOVE_SCORE[B] - z0 - FLOW[B],  # a learned flow: no cost of its own
        FLOW[A] + STOP_SCORE[A] - z0 - MISS,  # STOP at the start: no move made, no cost
        FLOW[A] + MOVE_SCORE[C] - z0 - FLOW[C],
    ]
    z1 = lse(MOVE_SCORE[C], STOP_SCORE[B])
    # at b (one move made): STOP pays one move; b->c is the forced-stop state after two moves
    d1 = [FLOW[B] + MOVE_SCORE[C] - z1 - (0.0 - 2 * cost), FLOW[B] + STOP_SCORE[B] - z1 - (MISS - cost)]
    expected = (sum(d * d for d in d0) + sum(d * d for d in d1)) / 2
    assert float(loss) == pytest.approx(expected, rel=1e-6)


def test_sft_reduction_keeps_only_the_taken_action_with_flows_fixed():
    graph = three_nodes()
    traj, cands = trajectory_and_candidates()
    q = torch.zeros((1, 4))
    policy_traj = Trajectory(question=0, nodes=[A], actions=[STOP], kind="policy")
    loss, stats = trajectory_loss(
        HandModel(),
        tables_of(graph),
        q,
        q,
        [traj, policy_traj],
        [cands, np.array([[STOP, 0, 1]])],
        [frozenset({C})],
        objective="sft",
        miss_log_reward=MISS,
        max_steps=2,
    )
    z0 = lse(MOVE_SCORE[B], STOP_SCORE[A], MOVE_SCORE[C])
    z1 = lse(MOVE_SCORE[C], STOP_SCORE[B])
    # log F(s_t) = log F(s'_0) = 0: the residual is log P(taken); on-policy trajectories take no part
    assert float(loss) == pytest.approx(((MOVE_SCORE[B] - z0) ** 2 + (MOVE_SCORE[C] - z1) ** 2) / 2, rel=1e-6)
    assert stats.states == 2


def test_stop_at_a_target_ties_the_flow_to_reward_one():
    graph = three_nodes()
    q = torch.zeros((1, 4))
    traj = Trajectory(question=0, nodes=[A], actions=[STOP], kind="policy")
    loss, _ = trajectory_loss(
        HandModel(),
        tables_of(graph),
        q,
        q,
        [traj],
        [np.array([[STOP, 0, PAD]])],
        [frozenset({A})],
        objective="db",
        miss_log_reward=MISS,
        max_steps=2,
    )
    z = lse(STOP_SCORE[A], MOVE_SCORE[B])
    expected = (FLOW[A] + STOP_SCORE[A] - z - 0.0) ** 2 + (FLOW[A] + MOVE_SCORE[B] - z - FLOW[B]) ** 2
    assert float(loss) == pytest.approx(expected, rel=1e-6)


def test_stop_is_an_action_everywhere_and_forced_after_max_steps():
    graph = three_nodes()
    t = tables_of(graph)
    q = torch.zeros((1, 4))
    # c has no moves: STOP is its only action, with probability 1; from a, beams stop or go on, never past 2 moves
    [outcome] = walk(HandModel(), t, q, q, [[C]], mode="beam", width=4, max_steps=2)
    assert [(f.nodes, f.actions) for f in outcome.finished] == [((C,), ())]
    assert outcome.finished[0].log_prob == pytest.approx(0.0)
    [outcome] = walk(HandModel(), t, q, q, [[A]], mode="beam", width=8, max_steps=2)
    paths = {f.nodes for f in outcome.finished}
    assert paths == {(A,), (A, B), (A, C), (A, B, C)}
    assert sum(math.exp(f.log_prob) for f in outcome.finished) == pytest.approx(1.0)
    forced = next(f for f in outcome.finished if f.nodes == (A, B, C))
    z0 = lse(MOVE_SCORE[B], STOP_SCORE[A], MOVE_SCORE[C])
    z1 = lse(MOVE_SCORE[C], STOP_SCORE[B])
    assert forced.log_prob == pytest.approx(MOVE_SCORE[B] - z0 + MOVE_SCORE[C] - z1)  # no STOP term: forced


def test_local_candidates_take_the_action_plus_k_alternatives_with_stop():
    graph = three_nodes()
    rng = np.random.default_rng(0)
    traj = Trajectory(question=0, nodes=[A, B, C], actions=[0, 2], kind="demo")
    c = local_candidates(graph, traj, 2, True, rng)
    assert c[0, 0] == 0 and set(c[0, 1:]) == {STOP, 1}  # a: STOP and the other move
    assert c[1, 0] == 2 and list(c[1, 1:]) == [STOP, PAD]  # b has no other move
    stopped = Trajectory(question=0, nodes=[A], actions=[STOP], kind="policy")
    c = local_candidates(graph, stopped, 3, True, rng)
    assert c[0, 0] == STOP and sorted(c[0, 1:]) == [PAD, 0, 1]


def test_local_candidates_leave_out_moves_back_to_the_start_when_returns_are_off():
    # a <-> b, b -> c: from b, the move back to a is an action only while returns are allowed
    back = (("to", "in"),)
    graph = WalkGraph.from_edges(["a", "b", "c"], [(A, B, OUT), (B, A, back), (B, C, OUT)])
    traj = Trajectory(question=0, nodes=[A, B, C], actions=[0, 2], kind="demo")
    for seed in range(5):
        rng = np.random.default_rng(seed)
        with_returns = local_candidates(graph, traj, 3, True, rng)
        without = local_candidates(graph, traj, 3, True, rng, return_to_start=False)
        assert set(with_returns[1, 1:]) == {STOP, 1, PAD}
        assert set(without[1, 1:]) == {STOP, PAD}  # b's only other move leads back to a
        assert without[1, 0] == 2 and without[0, 0] == 0


def test_segment_softmax_matches_a_dense_softmax():
    values = torch.tensor([1.0, 2.0, -1.0, 0.5])
    seg = torch.tensor([0, 0, 2, 2])  # state 1 has no moves
    stop = torch.tensor([0.3, -2.0, 0.0])
    move_lp, stop_lp = segment_log_softmax(values, seg, stop)
    dense0 = torch.log_softmax(torch.tensor([1.0, 2.0, 0.3]), 0)
    assert move_lp[:2].tolist() == pytest.approx(dense0[:2].tolist()) and float(stop_lp[0]) == pytest.approx(
        float(dense0[2])
    )
    assert float(stop_lp[1]) == pytest.approx(0.0)


def test_sampling_follows_the_probabilities_and_epsilon_is_uniform():
    rng = np.random.default_rng(1)
    n = 4000  # n identical states of two moves each, drawn in one vectorised call
    seg_ptr = np.arange(0, 2 * n + 1, 2)
    move_lp = np.tile(np.log([0.7, 0.2]), n)
    picks = sample_segments(move_lp, np.full(n, np.log(0.1)), seg_ptr, rng)
    chosen = np.where(picks < 0, 2, picks - seg_ptr[:-1])
    assert np.bincount(chosen, minlength=3) / n == pytest.approx([0.7, 0.2, 0.1], abs=0.03)
    picks = sample_segments(np.tile([0.0, -50.0], n), np.full(n, -50.0), seg_ptr, rng, epsilon=1.0)
    chosen = np.where(picks < 0, 2, picks - seg_ptr[:-1])
    assert np.bincount(chosen, minlength=3) / n == pytest.approx([1 / 3] * 3, abs=0.04)


def test_flat_entries_and_the_hub_cap():
    graph = WalkGraph.from_edges([str(i) for i in range(6)], [(0, v, OUT) for v in range(1, 6)] + [(1, 2, OUT)])
    seg_ptr, entries = flat_entries(graph.ptr, np.array([1, 0, 3]))
    assert seg_ptr.tolist() == [0, 1, 6, 6] and entries.tolist() == [5, 0, 1, 2, 3, 4]
    seg_ptr, entries = flat_entries(graph.ptr, np.array([0, 1]), cap=2, rng=np.random.default_rng(0))
    assert seg_ptr.tolist() == [0, 2, 3] and set(entries[:2]) < {0, 1, 2, 3, 4} and entries[2] == 5


def test_shortest_path_demonstrations_are_uniform_over_targets_and_paths():
    # 0 -> 1 -> 3, 0 -> 2 -> 3, 0 -> 4 (target 3 at depth 2 by two paths, target 4 at depth 1)
    graph = WalkGraph.from_edges(
        [str(i) for i in range(5)], [(0, 1, OUT), (0, 2, OUT), (1, 3, OUT), (2, 3, OUT), (0, 4, OUT)]
    )
    demos = ShortestPaths(graph, max_steps=3).sample(0, frozenset({3, 4}), 3000, np.random.default_rng(0))
    ends = [graph.target[d[-2]] for d in demos]
    assert all(d[-1] == STOP for d in demos)
    assert np.mean([e == 4 for e in ends]) == pytest.approx(0.5, abs=0.04)
    via = [graph.target[d[0]] for d in demos if len(d) == 3]
    assert np.mean([v == 1 for v in via]) == pytest.approx(0.5, abs=0.05)
    assert ShortestPaths(graph, max_steps=1).sample(0, frozenset({3}), 5, np.random.default_rng(0)) == []


class UniformModel(HandModel):
    """Every action of a state equally likely (all scores 0)."""

    def state_repr(self, t, g, qh, qfull, node, step):
        return torch.zeros((len(node), 3)) + 0 * g

    def action_repr(self, t, entries, question, qfull, on_path, is_start):
        return torch.zeros((len(entries), 3))

    def move_scores(self, h, act, state_of):
        return torch.zeros(len(state_of))

    def stop_score(self, h):
        return torch.zeros(len(h))


def test_a_merging_beam_joins_paths_to_one_node_along_one_chain():
    # a -> b1, b2, b3 ("to"); b1 -> c and b2 -> c ("to"), b3 -> c ("other"): two chains reach c
    b1, b2, b3, c = 1, 2, 3, 4
    other = (("other", "out"),)
    graph = WalkGraph.from_edges(
        ["a", "b1", "b2", "b3", "c"],
        [(A, b1, OUT), (A, b2, OUT), (A, b3, OUT), (b1, c, OUT), (b2, c, OUT), (b3, c, other)],
    )
    t = tables_of(graph)
    q = torch.zeros((1, 4))
    [plain] = walk(UniformModel(), t, q, q, [[A]], mode="beam", width=16, max_steps=2)
    [merged] = walk(UniformModel(), t, q, q, [[A]], mode="beam", width=16, max_steps=2, merge=True)
    assert sum(f.nodes[-1] == c for f in plain.finished) == 3
    at_c = sorted((f for f in merged.finished if f.nodes[-1] == c), key=lambda f: -f.log_prob)
    # from a: 4 actions (3 moves, STOP); from each b: 2 (c, STOP); c has no move, and max_steps stops it anyway
    assert [math.exp(f.log_prob) for f in at_c] == pytest.approx([2 / 8, 1 / 8])
    assert at_c[0].nodes in {(A, b1, c), (A, b2, c)} and at_c[1].nodes == (A, b3, c)
    assert sum(math.exp(f.log_prob) for f in merged.finished) == pytest.approx(1.0)
    # the same mass reaches each node either way: merging only frees beam slots
    for node in range(5):
        assert sum(math.exp(f.log_prob) for f in merged.finished if f.nodes[-1] == node) == pytest.approx(
            sum(math.exp(f.log_prob) for f in plain.finished if f.nodes[-1] == node)
        )

    # a narrow beam: unmerged, c's two same-chain paths take two of the three slots of the last step
    def readings(outcome):
        return [(f.nodes[-1], tuple(int(graph.sig[a]) for a in f.actions)) for f in outcome.finished]

    [narrow_plain] = walk(UniformModel(), t, q, q, [[A]], mode="beam", width=3, max_steps=2)
    [narrow] = walk(UniformModel(), t, q, q, [[A]], mode="beam", width=3, max_steps=2, merge=True)
    assert len(set(readings(narrow_plain))) < len(readings(narrow_plain))
    assert len(set(readings(narrow))) == len(readings(narrow))
    assert max(math.exp(f.log_prob) for f in narrow.finished) == pytest.approx(2 / 8)
