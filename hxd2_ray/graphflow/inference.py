"""Walk the policy from a question's start nodes: M trajectories by beam search or by sampling, then the terminal
nodes ranked by the probability mass that reaches them.

* ``beam``: at each step every live path is extended by each of its actions (and STOP); the ``M`` most
  probable extensions survive, those ending in STOP leave the beam as finished trajectories, those less probable
  than ``min_prob`` are dropped. After ``max_steps`` moves the survivors stop. Deterministic.
  With ``merge`` (``graphflow.beam_merge``), extensions that reach the same node along the same chain of edge
  signatures are one candidate: their probabilities are summed and the most probable path is kept as the
  evidence. A 3-hop question reaches one language through many films of the same director; unmerged, those
  paths fill the beam with one answer (Diverse-Recall below Recall), merged they take one slot.
* ``sample``: ``M`` trajectories drawn from the policy (a start chosen uniformly each time).

A terminal's score is the summed probability of the finished trajectories that end there (a lower bound of its
marginal under beam search, an estimate under sampling); its evidence is its most probable path. Only nodes of
the task's kind are ranked (entities for KG QA, chunks for passage retrieval), and with ``exclude_starts`` not the
question's start nodes. Questions are walked together:
one scoring call per step for all of their paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product
from typing import Collection, Sequence

import numpy as np
import torch  # noqa: TID253 - a torch module: imported only by code that trains or walks

from hxd2_ray.graphflow.model import FeatureTables, GraphFlowModel
from hxd2_ray.graphflow.walker import PathStates, StepScores, initial_states, sample_segments, score_actions

__all__ = ["Finished", "WalkOutcome", "walk"]


@dataclass(frozen=True, slots=True)
class Finished:
    log_prob: float
    nodes: tuple[int, ...]  # the start first, the terminal last
    actions: tuple[int, ...]  # entries (STOP not listed)


@dataclass
class WalkOutcome:
    finished: list[Finished] = field(default_factory=list)  # best first

    def ranked(
        self,
        allowed: np.ndarray | None = None,
        exclude: Collection[int] = (),
        signatures: np.ndarray | None = None,
        relations: Sequence[tuple[int, ...]] | None = None,
    ) -> list[tuple[int, float, Finished]]:
        """(terminal node, summed probability, its most probable trajectory), best first; ``allowed``: a boolean
        mask over nodes of what may be ranked; ``exclude``: nodes never ranked (a question's start nodes).

        ``signatures`` (the relation signature of every CSR entry) ranks *path first*: the trajectories are grouped
        by their chain of relation signatures, the chains ordered by their summed probability, and the terminals
        listed chain by chain (by their probability within the chain; a node once, where it first appears). The
        policy's belief about which relation chain the question asks for then decides, not a node that many
        chains happen to share (a year or a language every film of a director has).

        ``relations`` (signature id -> the relations it holds) groups by chains of *relations* instead: a move
        along an edge of several (a person who directed and wrote the film) counts for each chain it can be read
        as, so a chain's mass is not split across the signatures that hold its relation."""
        mass: dict[int, float] = {}
        best: dict[int, Finished] = {}
        chains: dict[tuple[int, ...], dict[int, float]] = {}
        for f in self.finished:
            node = f.nodes[-1]
            if (allowed is not None and not allowed[node]) or node in exclude:
                continue
            p = float(np.exp(f.log_prob))
            mass[node] = mass.get(node, 0.0) + p
            if node not in best or f.log_prob > best[node].log_prob:
                best[node] = f
            if signatures is not None:
                sigs = [int(signatures[a]) for a in f.actions]
                keys = [tuple(sigs)] if relations is None else product(*(relations[s] for s in sigs))
                for key in keys:
                    within = chains.setdefault(tuple(key), {})
                    within[node] = within.get(node, 0.0) + p
        if signatures is None:
            return sorted(((n, mass[n], best[n]) for n in mass), key=lambda x: (-x[1], -x[2].log_prob, x[0]))
        out: list[tuple[int, float, Finished]] = []
        seen: set[int] = set()
        for chain in sorted(chains, key=lambda c: (-sum(chains[c].values()), c)):
            for node, _ in sorted(chains[chain].items(), key=lambda kv: (-kv[1], kv[0])):
                if node not in seen:
                    seen.add(node)
                    out.append((node, mass[node], best[node]))
        return out

    def terminals(self, allowed: np.ndarray | None = None, exclude: Collection[int] = ()) -> list[int]:
        """Terminal of every finished trajectory, most probable trajectory first (duplicates kept)."""
        return [
            f.nodes[-1]
            for f in self.finished
            if (allowed is None or allowed[f.nodes[-1]]) and f.nodes[-1] not in exclude
        ]


def walk(
    model: GraphFlowModel,
    tables: FeatureTables,
    qh: torch.Tensor,
    qfull: torch.Tensor,
    starts: Sequence[Sequence[int]],
    *,
    mode: str,
    width: int,
    max_steps: int,
    rng: np.random.Generator | None = None,
    min_prob: float = 0.0,
    return_to_start: bool = True,
    merge: bool = False,
) -> list[WalkOutcome]:
    """One :class:`WalkOutcome` per question (row i of ``qh``/``qfull``, start nodes ``starts[i]``);
    ``return_to_start`` False: no trajectory moves back to its start node; ``merge``: the beam merges paths to
    the same node along the same signature chain (module docstring; ignored when sampling)."""
    with torch.no_grad():
        if mode == "beam":
            return _beam(model, tables, qh, qfull, starts, width, max_steps, min_prob, return_to_start, merge)
        if mode == "sample":
            return _sample(
                model, tables, qh, qfull, starts, width, max_steps, rng or np.random.default_rng(0), return_to_start
            )
    raise ValueError(f"unknown inference mode {mode!r}; valid: beam, sample")


def _finish(outcomes: list[WalkOutcome]) -> list[WalkOutcome]:
    for o in outcomes:
        o.finished.sort(key=lambda f: (-f.log_prob, f.nodes))
    return outcomes


def _finished(states: PathStates, i: int, step: int, log_prob: float, actions: tuple[int, ...]) -> Finished:
    """State ``i``'s trajectory after ``step`` moves, ended (by STOP or the step limit) with ``log_prob``."""
    return Finished(float(log_prob), tuple(int(n) for n in states.paths[i, : step + 1]), actions)


def _stop_all(
    outcomes: list[WalkOutcome],
    states: PathStates,
    step: int,
    logp: np.ndarray,
    actions: list[tuple[int, ...]],
) -> None:
    """Every state still walking stops where it is (after the last step)."""
    for i in range(len(states)):
        outcomes[int(states.question[i])].finished.append(_finished(states, i, step, logp[i], actions[i]))


def _scores(
    model: GraphFlowModel,
    tables: FeatureTables,
    qh: torch.Tensor,
    qfull: torch.Tensor,
    states: PathStates,
    return_to_start: bool,
) -> tuple[StepScores, np.ndarray, np.ndarray]:
    """Every action of every state scored, with the moves' and the STOPs' log-probabilities as arrays."""
    scores = score_actions(model, tables, qh, qfull, states, return_to_start=return_to_start)
    return scores, scores.move_logp.cpu().numpy(), scores.stop_logp.cpu().numpy()


def _take_moves(
    model: GraphFlowModel,
    tables: FeatureTables,
    scores: StepScores,
    states: PathStates,
    actions: list[tuple[int, ...]],
    step: int,
    ks: np.ndarray,
    rows: list[int],
) -> tuple[PathStates, list[tuple[int, ...]], np.ndarray]:
    """States ``ks`` each take their chosen move (flat row ``rows[j]`` of ``scores``) as move ``step + 1``: the
    new states, their actions so far, and the CSR entries just taken."""
    entries = scores.entries[np.asarray(rows)]
    g = model.next_path(scores.act[torch.as_tensor(rows)], states.g[torch.as_tensor(ks)])
    paths = states.paths[ks].copy()
    paths[:, step + 1] = tables.target[entries]
    taken = [actions[i] + (int(e),) for i, e in zip(ks, entries)]
    return PathStates(question=states.question[ks], g=g, paths=paths, steps=states.steps[ks] + 1), taken, entries


def _beam(
    model: GraphFlowModel,
    tables: FeatureTables,
    qh: torch.Tensor,
    qfull: torch.Tensor,
    starts: Sequence[Sequence[int]],
    width: int,
    max_steps: int,
    min_prob: float,
    return_to_start: bool = True,
    merge: bool = False,
) -> list[WalkOutcome]:
    outcomes = [WalkOutcome() for _ in starts]
    q_rows = np.array([q for q, s in enumerate(starts) for _ in s], dtype=np.int64)
    if len(q_rows) == 0:
        return outcomes
    start_nodes = np.array([n for s in starts for n in s], dtype=np.int64)
    logp = np.concatenate([np.full(len(s), -np.log(len(s))) for s in starts if len(s)])
    actions: list[tuple[int, ...]] = [() for _ in range(len(q_rows))]
    chain_ids: dict[tuple[int, int], int] = {}  # (parent chain id, signature) -> chain id; 0 is the empty chain
    state_chain = np.zeros(len(q_rows), dtype=np.int64)
    states = initial_states(model, tables, qh, q_rows, start_nodes, max_steps)
    for step in range(max_steps):
        if len(states) == 0:
            break
        scores, move_lp, stop_lp = _scores(model, tables, qh, qfull, states, return_to_start)
        seg = np.repeat(np.arange(len(states)), np.diff(scores.seg_ptr))
        # Candidates: every move (flat row r) and every STOP (row -1 - i), with cumulative log-probabilities.
        move_rows = np.arange(len(seg))
        move_cand_lp = logp[seg] + move_lp
        if merge and len(seg):
            move_rows, move_cand_lp = _merge_moves(
                states.question[seg],
                tables.target[scores.entries],
                state_chain[seg],
                tables.sig[scores.entries],
                move_cand_lp,
            )
        cand_state = np.concatenate([seg[move_rows], np.arange(len(states))])
        cand_row = np.concatenate([move_rows, -1 - np.arange(len(states))])
        cand_lp = np.concatenate([move_cand_lp, logp + stop_lp])
        if min_prob > 0:  # moves too improbable to matter are not kept (STOP candidates always are)
            keep = (cand_row < 0) | (cand_lp >= np.log(min_prob))
            cand_state, cand_row, cand_lp = cand_state[keep], cand_row[keep], cand_lp[keep]
        cand_q = states.question[cand_state]
        keep_rows: list[int] = []
        keep_states: list[int] = []
        keep_lp: list[float] = []
        order = np.lexsort((-cand_lp, cand_q))
        bounds = np.searchsorted(cand_q[order], np.arange(len(starts) + 1))
        for q in range(len(starts)):
            mine = order[bounds[q] : bounds[q + 1]][:width]
            for c in mine:
                i = int(cand_state[c])
                if cand_row[c] < 0:
                    outcomes[q].finished.append(_finished(states, i, step, cand_lp[c], actions[i]))
                else:
                    keep_rows.append(int(cand_row[c]))
                    keep_states.append(i)
                    keep_lp.append(float(cand_lp[c]))
        if not keep_rows:
            break
        ks = np.asarray(keep_states)
        states, actions, entries = _take_moves(model, tables, scores, states, actions, step, ks, keep_rows)
        if merge:
            state_chain = np.array(
                [
                    chain_ids.setdefault((int(state_chain[i]), int(tables.sig[e])), len(chain_ids) + 1)
                    for i, e in zip(ks, entries)
                ],
                dtype=np.int64,
            )
        logp = np.asarray(keep_lp)
    else:  # after max_steps moves the survivors stop
        _stop_all(outcomes, states, max_steps, logp, actions)
    return _finish(outcomes)


def _merge_moves(
    question: np.ndarray, node: np.ndarray, chain: np.ndarray, sig: np.ndarray, lp: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The moves of one beam step merged by (question, node reached, chain so far, signature of the move):
    (the most probable move of each group, the group's summed log-probability)."""
    keys = np.stack([question, node.astype(np.int64), chain, sig.astype(np.int64)], axis=1)
    _, group = np.unique(keys, axis=0, return_inverse=True)
    group = group.reshape(-1)
    order = np.lexsort((-lp, group))  # by group, most probable first
    first = order[np.flatnonzero(np.r_[True, group[order][1:] != group[order][:-1]])]  # group g's best: first[g]
    top = lp[first]
    total = np.zeros_like(top)
    np.add.at(total, group, np.exp(lp - top[group]))
    return first, top + np.log(total)


def _sample(
    model: GraphFlowModel,
    tables: FeatureTables,
    qh: torch.Tensor,
    qfull: torch.Tensor,
    starts: Sequence[Sequence[int]],
    width: int,
    max_steps: int,
    rng: np.random.Generator,
    return_to_start: bool = True,
) -> list[WalkOutcome]:
    outcomes = [WalkOutcome() for _ in starts]
    q_rows = np.array([q for q, s in enumerate(starts) if len(s) for _ in range(width)], dtype=np.int64)
    if len(q_rows) == 0:
        return outcomes
    start_nodes = np.array([int(starts[q][int(rng.integers(len(starts[q])))]) for q in q_rows], dtype=np.int64)
    n_starts = np.array([len(starts[q]) for q in q_rows])
    logp = -np.log(n_starts).astype(np.float64)
    actions: list[tuple[int, ...]] = [() for _ in range(len(q_rows))]
    states = initial_states(model, tables, qh, q_rows, start_nodes, max_steps)
    for step in range(max_steps):
        if len(states) == 0:
            break
        scores, move_lp, stop_lp = _scores(model, tables, qh, qfull, states, return_to_start)
        picks = sample_segments(move_lp, stop_lp, scores.seg_ptr, rng)
        keep, rows, lps = [], [], []
        for i, pick in enumerate(picks):
            if pick < 0:
                outcomes[int(states.question[i])].finished.append(
                    _finished(states, i, step, logp[i] + stop_lp[i], actions[i])
                )
            else:
                keep.append(i)
                rows.append(int(pick))
                lps.append(float(logp[i] + move_lp[pick]))
        if not keep:
            break
        states, actions, _entries = _take_moves(model, tables, scores, states, actions, step, np.asarray(keep), rows)
        logp = np.asarray(lps)
    else:  # after max_steps moves the survivors stop
        _stop_all(outcomes, states, max_steps, logp, actions)
    return _finish(outcomes)
