"""One step of the policy over many partial paths at once: every action of every current node, scored.

Shared by on-policy sampling (training) and inference (beam or sampling). The actions of a batch of states are
flattened: state i owns rows ``seg_ptr[i]:seg_ptr[i+1]`` (its node's CSR entries), and STOP is one more logit per
state; :func:`segment_log_softmax` normalises each state's moves and STOP together.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch  # noqa: TID253 - a torch module: imported only by code that trains or walks

from hxd2_ray.graphflow.model import FeatureTables, GraphFlowModel

__all__ = ["PathStates", "StepScores", "flat_entries", "sample_segments", "score_actions", "segment_log_softmax"]


@dataclass
class PathStates:
    """A batch of partial paths. ``paths[i, :steps[i] + 1]`` are the nodes visited (the start first), -1 after."""

    question: np.ndarray  # [n] row of the question tables
    g: torch.Tensor  # [n, H] path encodings
    paths: np.ndarray  # [n, max_steps + 1] nodes
    steps: np.ndarray  # [n] moves made

    @property
    def nodes(self) -> np.ndarray:
        return self.paths[np.arange(len(self.steps)), self.steps]

    def __len__(self) -> int:
        return len(self.steps)


@dataclass
class StepScores:
    seg_ptr: np.ndarray  # [n + 1]
    entries: np.ndarray  # [m] CSR entries (moves), state by state
    move_logits: torch.Tensor  # [m]
    stop_logits: torch.Tensor  # [n]
    move_logp: torch.Tensor  # [m] log-policy over all actions of the state
    stop_logp: torch.Tensor  # [n]
    act: torch.Tensor  # [m, H] action encodings (the GRU input when the move is taken)
    h: torch.Tensor  # [n, H]


def flat_entries(
    ptr: np.ndarray, nodes: np.ndarray, cap: int | None = None, rng: np.random.Generator | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(seg_ptr, entries): every CSR entry of ``nodes``, grouped by node in the given order. ``cap``: a node with
    more entries keeps ``cap`` of them, a uniform random subset (``rng``), in CSR order."""
    lo, hi = ptr[nodes], ptr[nodes + 1]
    counts = hi - lo
    if cap is not None and (counts > cap).any():
        parts = []
        for a, b in zip(lo.tolist(), hi.tolist()):
            if b - a > cap:
                parts.append(
                    a + np.sort(rng.choice(b - a, size=cap, replace=False))
                    if rng is not None
                    else np.arange(a, a + cap)
                )
            else:
                parts.append(np.arange(a, b))
        seg_ptr = np.zeros(len(nodes) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=seg_ptr[1:])
        return seg_ptr, (np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64))
    seg_ptr = np.zeros(len(nodes) + 1, dtype=np.int64)
    np.cumsum(counts, out=seg_ptr[1:])
    total = int(seg_ptr[-1])
    if total == 0:
        return seg_ptr, np.zeros(0, dtype=np.int64)
    offsets = np.arange(total, dtype=np.int64) - np.repeat(seg_ptr[:-1], counts)
    return seg_ptr, np.repeat(lo, counts) + offsets


def segment_log_softmax(
    values: torch.Tensor, seg: torch.Tensor, extra: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """log-softmax of each segment of ``values`` together with one ``extra`` logit per segment (STOP).
    Returns (log p of values, log p of extras)."""
    n = extra.shape[0]
    m = extra.detach().clone()
    if values.numel():
        m = m.scatter_reduce(0, seg, values.detach(), reduce="amax", include_self=True)
    total = torch.exp(extra - m)
    if values.numel():
        total = total.index_add(0, seg, torch.exp(values - m[seg]))
    log_z = m + torch.log(total)
    return (values - log_z[seg] if values.numel() else values), extra - log_z[:n]


def on_path_flags(paths: np.ndarray, seg_ptr: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(target already visited, target is the start) for flat entries."""
    seg = np.repeat(np.arange(len(paths)), np.diff(seg_ptr))
    rows = paths[seg]
    return (rows == targets[:, None]).any(axis=1), rows[:, 0] == targets


def score_actions(
    model: GraphFlowModel,
    tables: FeatureTables,
    qh: torch.Tensor,
    qfull: torch.Tensor,
    states: PathStates,
    cap: int | None = None,
    rng: np.random.Generator | None = None,
    return_to_start: bool = True,
) -> StepScores:
    """Scores and log-probabilities of every action of every state (``qh``/``qfull``: per-question tables,
    indexed by ``states.question``); ``cap``: at most that many moves per state, a random subset (training's
    on-policy sampling at hubs; inference scores every action); ``return_to_start`` False: the moves back to the
    path's start node are not actions (``graphflow.return_to_start``)."""
    device = tables.device
    nodes = states.nodes
    seg_ptr, entries = flat_entries(tables.ptr, nodes, cap, rng)
    if not return_to_start and len(entries):
        owner = np.repeat(np.arange(len(nodes)), np.diff(seg_ptr))
        away = tables.target[entries] != states.paths[owner, 0]
        entries = entries[away]
        seg_ptr = np.concatenate([[0], np.cumsum(np.bincount(owner[away], minlength=len(nodes)))]).astype(np.int64)
    counts = np.diff(seg_ptr)
    q_rows = torch.as_tensor(states.question, device=device)
    node_t = torch.as_tensor(nodes.astype(np.int64), device=device)
    step_t = torch.as_tensor(states.steps.astype(np.int64), device=device)
    h = model.state_repr(tables, states.g, qh[q_rows], qfull[q_rows], node_t, step_t)
    stop = model.stop_score(h)
    seg = torch.as_tensor(np.repeat(np.arange(len(nodes)), counts), device=device)
    if len(entries):
        on_path, is_start = on_path_flags(states.paths, seg_ptr, tables.target[entries])
        entries_t = torch.as_tensor(entries, device=device)
        act = model.action_repr(
            tables,
            entries_t,
            q_rows[seg],
            qfull,
            torch.as_tensor(on_path, device=device),
            torch.as_tensor(is_start, device=device),
        )
        moves = model.move_scores(h, act, seg)
    else:
        act = h.new_zeros((0, h.shape[1]))
        moves = h.new_zeros(0)
    move_logp, stop_logp = segment_log_softmax(moves, seg, stop)
    return StepScores(
        seg_ptr=seg_ptr,
        entries=entries,
        move_logits=moves,
        stop_logits=stop,
        move_logp=move_logp,
        stop_logp=stop_logp,
        act=act,
        h=h,
    )


def initial_states(
    model: GraphFlowModel,
    tables: FeatureTables,
    qh: torch.Tensor,
    question: np.ndarray,
    starts: np.ndarray,
    max_steps: int,
) -> PathStates:
    paths = np.full((len(starts), max_steps + 1), -1, dtype=np.int64)
    paths[:, 0] = starts
    start_t = torch.as_tensor(starts.astype(np.int64), device=tables.device)
    g = model.initial_path(tables, qh[torch.as_tensor(question, device=tables.device)], start_t)
    return PathStates(question=question.astype(np.int64), g=g, paths=paths, steps=np.zeros(len(starts), np.int64))


def sample_segments(
    move_logp: np.ndarray, stop_logp: np.ndarray, seg_ptr: np.ndarray, rng: np.random.Generator, epsilon: float = 0.0
) -> np.ndarray:
    """One action per state, drawn from its log-probabilities (Gumbel-max, vectorised over all states); with
    probability ``epsilon`` a uniform action instead. Returns the flat move row, or -1 for STOP."""
    n = len(stop_logp)
    counts = np.diff(seg_ptr)
    seg = np.repeat(np.arange(n), counts)
    move_key = move_logp + rng.gumbel(size=len(move_logp))
    stop_key = stop_logp + rng.gumbel(size=n)
    pick = np.full(n, -1, dtype=np.int64)
    if len(move_key):
        order = np.lexsort((-move_key, seg))  # by state, best key first
        has = counts > 0
        best = order[seg_ptr[:-1][has]]
        better = move_key[best] > stop_key[has]
        pick[np.flatnonzero(has)[better]] = best[better]
    if epsilon > 0:
        uniform = rng.random(n) < epsilon
        choice = np.floor(rng.random(n) * (counts + 1)).astype(np.int64)  # counts: STOP
        flat = np.where(choice < counts, seg_ptr[:-1] + choice, -1)
        pick = np.where(uniform, flat, pick)
    return pick
