"""Trajectories over the walk graph: positive demonstrations, on-policy samples, and local exploration.

* **Demonstrations** (:class:`ShortestPaths`): a breadth-first search from the start, at most ``max_steps``
  layers, counting shortest paths; a demonstration picks a reachable target uniformly, then one of its shortest
  paths uniformly (walking back through the layers, each parent weighted by its path count), then STOP. These
  are the "positive trajectories" of the paper.
* **On-policy** (:func:`sample_on_policy`): the current policy walks from a start node (with probability
  ``epsilon`` a uniform action instead), STOP forced after ``max_steps`` moves. Whatever it reaches is kept,
  hit or miss: a miss ends in the explicit low reward (the paper's limitation, "positive trajectories only",
  is what this fixes).
* **Local exploration** (:func:`local_candidates`): at every state of a trajectory, the action taken plus ``k``
  alternatives drawn uniformly without replacement from the node's other actions (STOP always one of them when
  ``explore_stop``: it is the one action whose next flow, the reward, is known exactly).

An action is a CSR entry of the walk graph (``>= 0``), :data:`STOP` (-1) or :data:`PAD` (-2, a candidate slot
left empty when a node has fewer than k alternatives).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch  # noqa: TID253 - a torch module: imported only by code that trains or walks

from hxd2_ray.graphflow.model import FeatureTables, GraphFlowModel
from hxd2_ray.graphflow.walk_graph import WalkGraph
from hxd2_ray.graphflow.walker import flat_entries, initial_states, sample_segments, score_actions

__all__ = ["PAD", "STOP", "ShortestPaths", "Trajectory", "local_candidates", "sample_on_policy"]

STOP = -1
PAD = -2


@dataclass
class Trajectory:
    question: int  # row of the batch's question tables
    nodes: list[int]  # visited, the start first
    actions: list[int]  # one per decision: entries, then STOP (absent when STOP was forced after max_steps moves)
    kind: str  # demo | policy
    hit: bool = False  # the last node is a target

    @property
    def terminal(self) -> int:
        return self.nodes[-1]


class ShortestPaths:
    """Shortest-path demonstrations from one start to a target set, sampled uniformly."""

    def __init__(self, graph: WalkGraph, max_steps: int):
        self.graph = graph
        self.max_steps = max_steps
        self._dist = np.full(graph.n_nodes, -1, dtype=np.int16)
        self._count = np.zeros(graph.n_nodes, dtype=np.float64)

    def search(self, start: int, targets: frozenset[int]) -> "_Ball":
        """Layers of the breadth-first search from ``start``, up to ``max_steps`` or until every target is met."""
        g = self.graph
        dist, count = self._dist, self._count
        touched = [np.array([start], dtype=np.int64)]
        dist[start] = 0
        count[start] = 1.0
        layers: list[tuple[np.ndarray, ...]] = []  # (parent, child, entry, parent's path count) per depth
        reached: dict[int, int] = {start: 0} if start in targets else {}
        frontier = np.array([start], dtype=np.int64)
        try:
            for depth in range(1, self.max_steps + 1):
                if len(frontier) == 0 or len(reached) == len(targets):
                    break
                seg_ptr, entries = flat_entries(g.ptr, frontier)
                parent = np.repeat(frontier, np.diff(seg_ptr))
                child = g.target[entries].astype(np.int64)
                fresh = child[dist[child] < 0]
                dist[fresh] = depth
                keep = dist[child] == depth
                parent, child, entries = parent[keep], child[keep], entries[keep]
                parent_count = count[parent]
                np.add.at(count, child, parent_count)
                layers.append((parent, child, entries, parent_count))
                frontier = np.unique(child)
                touched.append(frontier)
                reached.update(
                    (int(t), depth) for t in frontier[np.isin(frontier, list(targets))] if int(t) not in reached
                )
            return _Ball(start, layers, reached)
        finally:
            for nodes in touched:
                dist[nodes] = -1
                count[nodes] = 0.0

    def sample(self, start: int, targets: frozenset[int], n: int, rng: np.random.Generator) -> list[list[int]]:
        """``n`` demonstrations (action lists ending in STOP); none when no target is within ``max_steps``."""
        return self.search(start, targets).sample(n, rng)


@dataclass
class _Ball:
    start: int
    layers: list[tuple[np.ndarray, ...]]
    reached: dict[int, int]  # reached target -> distance

    def sample(self, n: int, rng: np.random.Generator) -> list[list[int]]:
        if not self.reached:
            return []
        targets = sorted(self.reached)
        out = []
        for _ in range(n):
            node = targets[int(rng.integers(len(targets)))]
            actions: list[int] = []
            for depth in range(self.reached[node], 0, -1):
                parent, child, entries, parent_count = self.layers[depth - 1]
                rows = np.flatnonzero(child == node)
                weights = parent_count[rows]
                r = rows[int(rng.choice(len(rows), p=weights / weights.sum()))]
                actions.append(int(entries[r]))
                node = int(parent[r])
            out.append([*reversed(actions), STOP])
        return out


def walk_nodes(graph: WalkGraph, start: int, actions: Sequence[int]) -> list[int]:
    nodes = [start]
    for a in actions:
        if a >= 0:
            nodes.append(int(graph.target[a]))
    return nodes


def local_candidates(
    graph: WalkGraph,
    traj: Trajectory,
    k: int,
    explore_stop: bool,
    rng: np.random.Generator,
    return_to_start: bool = True,
) -> np.ndarray:
    """[decisions, k + 1] candidate actions: column 0 the action taken, then k alternatives (PAD when short).
    ``return_to_start`` False: a move back to the trajectory's start is no alternative, as it is no action when
    sampling or walking (the local softmax and the flows must describe the same action sets)."""
    out = np.full((len(traj.actions), k + 1), PAD, dtype=np.int64)
    start = traj.nodes[0]
    for t, taken in enumerate(traj.actions):
        node = traj.nodes[t]
        lo, hi = int(graph.ptr[node]), int(graph.ptr[node + 1])
        moves = np.arange(lo, hi, dtype=np.int64)
        if not return_to_start:
            moves = moves[graph.target[lo:hi] != start]
        if taken >= 0:
            moves = moves[moves != taken]
        out[t, 0] = taken
        alts: list[int] = []
        budget = k
        if taken != STOP and explore_stop:
            alts.append(STOP)
            budget -= 1
            pool = moves
        else:
            pool = moves if taken == STOP else np.append(moves, STOP)
        if budget > 0 and len(pool):
            alts.extend(int(a) for a in rng.choice(pool, size=min(budget, len(pool)), replace=False))
        out[t, 1 : 1 + len(alts)] = alts
    return out


def sample_on_policy(
    model: GraphFlowModel,
    tables: FeatureTables,
    qh: torch.Tensor,
    qfull: torch.Tensor,
    questions: np.ndarray,
    starts: np.ndarray,
    targets: Sequence[frozenset[int]],
    max_steps: int,
    epsilon: float,
    rng: np.random.Generator,
    graph: WalkGraph,
    max_actions: int | None = None,
    return_to_start: bool = True,
) -> list[Trajectory]:
    """One trajectory per (question row, start) pair, drawn from the current policy (no gradient); at a node with
    more than ``max_actions`` moves, from a random subset of that many (and STOP)."""
    trajs = [Trajectory(question=int(q), nodes=[int(s)], actions=[], kind="policy") for q, s in zip(questions, starts)]
    with torch.no_grad():
        states = initial_states(model, tables, qh, questions, starts, max_steps)
        alive = np.arange(len(trajs))
        for step in range(max_steps + 1):
            if len(alive) == 0:
                break
            if step == max_steps:  # STOP forced: not a decision
                break
            scores = score_actions(model, tables, qh, qfull, states, max_actions, rng, return_to_start)
            picks = sample_segments(
                scores.move_logp.cpu().numpy(), scores.stop_logp.cpu().numpy(), scores.seg_ptr, rng, epsilon
            )
            chosen_rows: list[int] = []
            keep: list[int] = []
            for i, tid in enumerate(alive):
                traj = trajs[tid]
                if picks[i] < 0:
                    traj.actions.append(STOP)
                    continue
                entry = int(scores.entries[picks[i]])
                traj.actions.append(entry)
                traj.nodes.append(int(graph.target[entry]))
                chosen_rows.append(int(picks[i]))
                keep.append(i)
            if not keep:
                break
            keep_a = np.asarray(keep)
            g = model.next_path(scores.act[torch.as_tensor(chosen_rows)], states.g[torch.as_tensor(keep_a)])
            paths = states.paths[keep_a].copy()
            steps = states.steps[keep_a] + 1
            paths[np.arange(len(keep_a)), steps] = [trajs[alive[i]].nodes[-1] for i in keep]
            states = type(states)(question=states.question[keep_a], g=g, paths=paths, steps=steps)
            alive = alive[keep_a]
    for traj in trajs:
        traj.hit = traj.terminal in targets[traj.question]
    return trajs
