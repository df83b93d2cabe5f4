"""Relation-chain demonstrations (``graphflow.demonstrations: chain``): positive trajectories along the relation
chain that answers the question, not along whichever path reaches an answer first.

A shortest path to one of the answers is often not the question's path. "What languages are the films whose
directors also directed [X]" is answered, for an English film, by X's own language in one move, or through X's
release year and any English film of that year; MetaQA's 3-hop training set taught with such paths picks the
wrong chain on most of its misses (README, "GraphFlow"). Here:

1. From each start node, every relation chain of at most ``max_steps`` moves and the nodes it reaches. A chain
   is a sequence of steps, a step a (label, direction); an edge whose signature holds several labels (a person
   who directed and wrote the film) can be followed as each of them. A frontier of more than ``max_frontier``
   nodes is not expanded further (such a chain reaches too much to be what a question with a few answers asks
   for; the cap bounds the work at hubs). With ``return_to_start`` off (``graphflow.return_to_start``), no
   chain moves back to the start node, as no walk does.
2. A chain's fit to a question is the F1 of what it reaches (start nodes excluded) against the answers.
3. Questions asked in the same words (the same policy text: a template with the topic masked) ask for the same
   chain: the chain a question is taught is its group's best by votes (each question votes for the chains that
   fit it best), then summed fit, then fewer moves. A question its group's chain does not answer (its topic
   lacks that relation in this KB) is not taught: any chain that reaches its answers is a coincidence. A
   question alone in its group takes its own best chain.
4. A demonstration picks one of the answers the chain reaches, uniformly, then a path of the chain to it
   (uniformly among the chain's last edges into it, and so on back to the start), then STOP.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from hxd2_ray.graphflow.walk_graph import WalkGraph
from hxd2_ray.graphflow.walker import flat_entries

__all__ = ["Chain", "ChainDemonstrations", "ChainFit"]

STOP = -1  # as hxd2_ray.graphflow.trajectories.STOP (that module needs torch; this one does not)

Chain = tuple[int, ...]  # step ids (see ChainDemonstrations.step_names)


@dataclass(frozen=True)
class ChainFit:
    chain: Chain
    f1: float
    hits: int  # answers reached


class ChainDemonstrations:
    """Chains, their fits and demonstrations over one walk graph."""

    def __init__(self, graph: WalkGraph, max_steps: int, max_frontier: int = 5000, return_to_start: bool = True):
        self.graph = graph
        self.max_steps = max_steps
        self.max_frontier = max_frontier
        self.return_to_start = return_to_start
        steps = sorted({step for sig in graph.signatures for step in sig})
        self.step_names: list[tuple[str, str]] = steps
        index = {step: i for i, step in enumerate(steps)}
        self._sig_steps = np.zeros((max(len(graph.signatures), 1), max(len(steps), 1)), dtype=bool)
        for s, sig in enumerate(graph.signatures):
            for step in sig:
                self._sig_steps[s, index[step]] = True

    def chain_name(self, chain: Chain) -> str:
        return " > ".join(f"{'<-' if d == 'in' else ''}{label}" for label, d in (self.step_names[s] for s in chain))

    # -------------------------------------------------------------------------------------------- reach

    def _layer(self, frontier: np.ndarray, start: int) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """step -> (parent, child, entry) of the frontier's edges that can be followed as that step."""
        g = self.graph
        seg_ptr, entries = flat_entries(g.ptr, frontier)
        parent = np.repeat(frontier, np.diff(seg_ptr))
        child = g.target[entries].astype(np.int64)
        if not self.return_to_start:
            away = child != start
            parent, child, entries = parent[away], child[away], entries[away]
        if len(entries) == 0:
            return {}
        member = self._sig_steps[g.sig[entries]]  # [edges, steps]
        out = {}
        for step in np.flatnonzero(member.any(axis=0)).tolist():
            rows = member[:, step]
            out[step] = (parent[rows], child[rows], entries[rows])
        return out

    def reaches(self, start: int) -> dict[Chain, np.ndarray]:
        """Every chain of 1..max_steps moves from ``start`` -> the distinct nodes it ends at."""
        out: dict[Chain, np.ndarray] = {}
        frontier: dict[Chain, np.ndarray] = {(): np.array([start], dtype=np.int64)}
        for _ in range(self.max_steps):
            nxt: dict[Chain, np.ndarray] = {}
            for chain, nodes in frontier.items():
                if len(nodes) > self.max_frontier:
                    continue
                for step, (_, child, _) in self._layer(nodes, start).items():
                    nxt[chain + (step,)] = np.unique(child)
            out.update(nxt)
            frontier = nxt
        return out

    def fits(self, starts: Sequence[int], targets: frozenset[int]) -> dict[Chain, ChainFit]:
        """Each chain reaching at least one target from some start -> its fit (the starts' reaches united)."""
        reach: dict[Chain, set[int]] = defaultdict(set)
        for s in starts:
            for chain, nodes in self.reaches(int(s)).items():
                reach[chain].update(nodes.tolist())
        skip = {int(s) for s in starts}
        out = {}
        for chain, reached in reach.items():
            reached -= skip
            hits = len(reached & targets)
            if hits:
                out[chain] = ChainFit(chain, 2 * hits / (len(reached) + len(targets)), hits)
        return out

    # ---------------------------------------------------------------------------------------- choosing

    @staticmethod
    def choose(fits: Sequence[dict[Chain, ChainFit]], groups: Sequence[str]) -> list[Chain | None]:
        """The chain each question is taught (None: no chain reaches one of its answers); ``groups[i]``: question
        i's wording (questions with the same one share a chain where it reaches their answers)."""
        # (votes, summed fit): a question votes for each chain that fits it best (ties all vote). The chain a
        # wording asks for fits every question of it best; a shortcut (the topic's own language is the answer)
        # only those where it coincides, however well it fits them.
        summed: dict[str, dict[Chain, tuple[float, float]]] = defaultdict(dict)
        for fit, group in zip(fits, groups):
            top = max((f.f1 for f in fit.values()), default=0.0)
            for chain, f in fit.items():
                votes, total = summed[group].get(chain, (0.0, 0.0))
                summed[group][chain] = (votes + (f.f1 >= top - 1e-9), total + f.f1)
        size = Counter(groups)
        best_of_group = {group: _best(scores) for group, scores in summed.items()}
        out: list[Chain | None] = []
        for fit, group in zip(fits, groups):
            shared = best_of_group.get(group)
            if shared in fit:
                out.append(shared)
            elif fit and size[group] == 1:
                out.append(_best({c: (f.f1,) for c, f in fit.items()}))
            else:  # nothing reaches its answers, or its data disagrees with its wording's chain: not taught
                out.append(None)
        return out

    # ---------------------------------------------------------------------------------------- sampling

    def sample(
        self, start: int, chain: Chain, targets: frozenset[int], n: int, rng: np.random.Generator
    ) -> list[list[int]]:
        """``n`` demonstrations from ``start`` along ``chain`` (action lists ending in STOP); none when the chain
        reaches no target from there."""
        layers = []
        frontier = np.array([start], dtype=np.int64)
        for step in chain:
            layer = self._layer(frontier, start).get(step)
            if layer is None:
                return []
            layers.append(layer)
            frontier = np.unique(layer[1])
        # back from the targets: keep only the edges on some path that ends at one
        wanted = np.array(sorted(targets - {start}), dtype=np.int64)
        kept = []
        for parent, child, entry in reversed(layers):
            rows = np.isin(child, wanted)
            kept.append((parent[rows], child[rows], entry[rows]))
            wanted = np.unique(parent[rows])
        kept.reverse()
        ends = np.unique(kept[-1][1]) if kept else np.array([], dtype=np.int64)
        if len(ends) == 0 or len(wanted) == 0:
            return []
        out = []
        for _ in range(n):
            node = int(ends[int(rng.integers(len(ends)))])
            actions: list[int] = []
            for parent, child, entry in reversed(kept):
                into = np.flatnonzero(child == node)
                r = int(into[int(rng.integers(len(into)))])
                actions.append(int(entry[r]))
                node = int(parent[r])
            out.append([*reversed(actions), STOP])
        return out


def _best(scores: Mapping[Chain, tuple[float, ...]]) -> Chain:
    return max(scores, key=lambda c: (tuple(round(v, 9) for v in scores[c]), -len(c), tuple(-s for s in c)))
