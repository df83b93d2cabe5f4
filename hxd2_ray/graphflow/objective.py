r"""Detailed balance with local exploration (DBLE), in log space, and its behaviour-cloning reduction.

For every non-terminal state :math:`s_t` of a trajectory, with the action taken :math:`a'_{t,0}` and k explored
alternatives :math:`a'_{t,1..k}` leading to :math:`s'_{t+1,i}`, the paper's loss is

.. math::

    \mathcal{L}(s_t) = \sum_{i=0}^{k} \Big[\log F(s_t) - \log F(s'_{t+1,i}) + r_\theta(s_t, a'_{t,i})
                       - \log \sum_{j=0}^{k} e^{r_\theta(s_t, a'_{t,j})}\Big]^2

i.e. the detailed-balance residual :math:`\log F(s) + \log P(s'|s) - \log F(s') - \log P_B(s|s')` with the
backward policy fixed to 1 (:math:`\log P_B = 0`: a state is the whole path so far, so it has exactly one
parent and retrieval is not reversed) and the forward policy normalised over the k+1 local candidates. This
module computes exactly that sum; the batch loss is its mean over the decision states.

**Boundary conditions: the reading implemented.** The review states them as
":math:`\log F(s_0) = \log F(s_T) = 1`". Taken literally this cannot hold with any reward that varies: detailed
balance along a trajectory telescopes to :math:`\log F(s_0) = \log F(s_T) - \sum_t \log P(a_t|s_t)`, so fixing both
ends fixes the trajectory's probability whatever it reached. The issue asks for "the terminal flow tied to the
reward", which is the GFlowNet boundary condition, and that is what is implemented:

* terminal states: STOP at node :math:`x` (the self-loop) leads to the terminal :math:`s_T` with
  :math:`\log F(s_T) := \log R(x)`, where :math:`\log R = 0` ("1" in the reward scale) for a target and
  ``miss_log_reward`` (explicitly low, -15 by default) for anything else. A state reached by the
  ``max_steps``-th move can only STOP, so its flow is tied the same way: :math:`\log F(s) := \log R(\text{node})`;
* a trajectory's reward may pay for its length (``move_log_cost`` c, ``graphflow.move_log_cost``):
  :math:`\log R(\tau) = \log R(x) - c\,|\tau|`. A state is its whole path, so the terminals of a GFlowNet are
  paths, and a node reached by many paths is sampled with their summed reward: "what genre is [X]" is answered by
  one move to X's genre but by hundreds of three-move walks (X, its director, another of the director's films,
  that film's genre: mostly X's genre too), so without a cost the policy learns the walks (the README's 1-hop
  analysis). With the cost a longer path must be that many times likelier to earn the same flow (MetaQA 1-hop,
  two epochs: test Hit@1 0.939 / 0.944 / 0.931 at cost 0 / 1 / 2, no clear gain, so the default is 0: at a hub
  the walks outnumber any cost that leaves three-move answers their reward);
* the initial flow :math:`\log F(s_0)` is *learned* (the flow head at the start state): it is the log partition
  function of the question, :math:`\log Z(q) = \log \sum_\tau R(\tau)`, which differs per question (one
  answer or fifty), so pinning it to a constant would contradict the terminal condition;
* every other :math:`\log F(s'_{t+1,i})` is the flow head's estimate, learned through the same loss (the
  bootstrapping that turns the outcome-only reward into per-step credit).

**SFT reduction** (``objective: sft``). The review: with :math:`\log F(s_t) = 1` and
:math:`\log F(s'_{t+1,i}) = 0` the objective reduces to behaviour cloning. In flow terms that is
:math:`F(s_t) = F(s'_{t+1,0}) = 1` along the demonstration and :math:`F(s'_{t+1,i \ge 1}) \to 0` for the alternatives,
whose terms then only ask their probability to vanish, which the softmax's normalisation already does once the
taken action's probability is one. So ``sft`` keeps the same candidates and the same local softmax, fixes the
flows, keeps the i = 0 term, :math:`[\, r_\theta(s_t, a'_{t,0}) - \log\sum_j e^{r_\theta(s_t, a'_{t,j})} ]^2` (its
minimum is the cross-entropy's, :math:`P = 1`), and trains on the demonstrations only: no on-policy samples, no
reward for misses. That is the ablation: the only differences are the flows and what they bring with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch  # noqa: TID253 - a torch module: imported only by code that trains or walks

from hxd2_ray.graphflow.model import FeatureTables, GraphFlowModel
from hxd2_ray.graphflow.trajectories import PAD, STOP, Trajectory
from hxd2_ray.graphflow.walker import initial_states

__all__ = ["LossStats", "dble_residuals", "trajectory_loss"]


def dble_residuals(
    log_flow: torch.Tensor, scores: torch.Tensor, next_log_flow: torch.Tensor, valid: torch.Tensor
) -> torch.Tensor:
    """Residuals :math:`\\log F(s) + r_i - \\log\\sum_j e^{r_j} - \\log F(s'_i)` of states ``[n]`` and candidates
    ``[n, k+1]`` (``valid`` masks empty slots, whose residual is 0)."""
    masked = scores.masked_fill(~valid, float("-inf"))
    log_p = masked - torch.logsumexp(masked, dim=1, keepdim=True)
    delta = log_flow.unsqueeze(1) + log_p - next_log_flow
    return torch.where(valid, delta, torch.zeros_like(delta))


@dataclass
class LossStats:
    states: int = 0  # decision states in the loss
    transitions: int = 0  # state-candidate pairs (k+1 per state, fewer at small nodes)
    taken_best: int = 0  # demonstration states whose taken action scored best among the candidates
    demo_states: int = 0
    log_z: float = 0.0  # mean learned log F(s_0) of the batch (db)


def trajectory_loss(
    model: GraphFlowModel,
    tables: FeatureTables,
    qh: torch.Tensor,
    qfull: torch.Tensor,
    trajectories: Sequence[Trajectory],
    candidates: Sequence[np.ndarray],
    targets: Sequence[frozenset[int]],
    *,
    objective: str,
    miss_log_reward: float,
    max_steps: int,
    move_log_cost: float = 0.0,
) -> tuple[torch.Tensor, LossStats]:
    """Mean DBLE (or SFT) loss of the decision states of ``trajectories``; ``candidates[j]`` is trajectory j's
    [decisions, k+1] local candidate table (column 0 = the action taken). ``move_log_cost``: the log-reward a
    trajectory pays per move (``graphflow.move_log_cost``): log R(path) = log R(node) - cost * moves."""
    device = tables.device
    sft = objective == "sft"
    stats = LossStats()
    if sft:
        keep = [j for j, t in enumerate(trajectories) if t.kind == "demo"]
        trajectories = [trajectories[j] for j in keep]
        candidates = [candidates[j] for j in keep]
    if not trajectories:
        return torch.zeros((), device=device, requires_grad=True), stats
    k1 = candidates[0].shape[1]
    questions = np.array([t.question for t in trajectories], dtype=np.int64)
    starts = np.array([t.nodes[0] for t in trajectories], dtype=np.int64)
    states = initial_states(model, tables, qh, questions, starts, max_steps)
    g = states.g
    paths = states.paths
    decisions = np.array([len(t.actions) for t in trajectories])
    total = torch.zeros((), device=device)
    q_t = torch.as_tensor(questions, device=device)
    log_z: list[torch.Tensor] = []
    for step in range(int(decisions.max())):
        rows = np.flatnonzero(decisions > step)
        rows_t = torch.as_tensor(rows, device=device)
        nodes = paths[rows, step]
        cand = np.stack([candidates[j][step] for j in rows])  # [m, k+1]
        m = len(rows)
        step_t = torch.full((m,), step, dtype=torch.long, device=device)
        node_t = torch.as_tensor(nodes, device=device)
        qh_r, qf_r = qh[q_t[rows_t]], qfull[q_t[rows_t]]
        h = model.state_repr(tables, g[rows_t], qh_r, qf_r, node_t, step_t)

        is_move = cand >= 0
        valid = cand != PAD
        mi, mj = np.nonzero(is_move)
        entries = cand[mi, mj]
        targets_of_moves = tables.target[entries].astype(np.int64)
        path_rows = paths[rows][mi, : step + 1]
        on_path = (path_rows == targets_of_moves[:, None]).any(axis=1)
        is_start = path_rows[:, 0] == targets_of_moves
        mi_t = torch.as_tensor(mi, device=device)
        act = model.action_repr(
            tables,
            torch.as_tensor(entries, device=device),
            q_t[rows_t][mi_t],
            qfull,
            torch.as_tensor(on_path, device=device),
            torch.as_tensor(is_start, device=device),
        )
        scores = h.new_zeros((m, k1))
        stop_score = model.stop_score(h)
        scores = scores.index_put((mi_t, torch.as_tensor(mj, device=device)), model.move_scores(h, act, mi_t))
        si, sj = np.nonzero(cand == STOP)
        scores = scores.index_put(
            (torch.as_tensor(si, device=device), torch.as_tensor(sj, device=device)),
            stop_score[torch.as_tensor(si, device=device)],
        )
        valid_t = torch.as_tensor(valid, device=device)

        if sft:
            log_flow = h.new_zeros(m)
            next_flow = h.new_zeros((m, k1))
            delta = dble_residuals(log_flow, scores, next_flow, valid_t)[:, 0]
            total = total + (delta**2).sum()
            stats.transitions += int(valid.sum())
        else:
            log_flow = model.log_flow(h)
            if step == 0:
                log_z.append(log_flow.detach())
            next_flow = torch.zeros((m, k1), device=device)
            # STOP: the terminal flow is the reward of the node the walk stops at.
            stop_r = np.array([0.0 if nodes[i] in targets[questions[rows[i]]] else miss_log_reward for i in si])
            stop_r = stop_r - move_log_cost * step
            next_flow = next_flow.index_put(
                (torch.as_tensor(si, device=device), torch.as_tensor(sj, device=device)),
                torch.as_tensor(stop_r, dtype=next_flow.dtype, device=device),
            )
            if step + 1 == max_steps:  # the next state can only STOP: its flow is its node's reward too
                move_flow = torch.as_tensor(
                    np.array(
                        [
                            0.0 if v in targets[questions[rows[i]]] else miss_log_reward
                            for i, v in zip(mi, targets_of_moves)
                        ]
                    )
                    - move_log_cost * max_steps,
                    dtype=next_flow.dtype,
                    device=device,
                )
            else:
                g_next = model.next_path(act, g[rows_t][mi_t])
                h_next = model.state_repr(
                    tables,
                    g_next,
                    qh_r[mi_t],
                    qf_r[mi_t],
                    torch.as_tensor(targets_of_moves, device=device),
                    torch.full((len(mi),), step + 1, dtype=torch.long, device=device),
                )
                move_flow = model.log_flow(h_next)
            next_flow = next_flow.index_put((mi_t, torch.as_tensor(mj, device=device)), move_flow)
            delta = dble_residuals(log_flow, scores, next_flow, valid_t)
            total = total + (delta**2).sum()
            stats.transitions += int(valid.sum())
        stats.states += m

        demo = np.array([trajectories[j].kind == "demo" for j in rows])
        if demo.any():
            masked = scores.detach().masked_fill(~valid_t, float("-inf"))
            best = (masked.argmax(dim=1) == 0).cpu().numpy()
            stats.taken_best += int(best[demo].sum())
            stats.demo_states += int(demo.sum())

        # Advance the taken moves' paths (column 0).
        moving = cand[:, 0] >= 0
        if moving.any():
            idx = np.flatnonzero(moving)
            taken_rows = np.flatnonzero((mj == 0) & is_move[mi, mj])  # act rows of column-0 moves, in row order
            g = g.clone()
            g[rows_t[torch.as_tensor(idx, device=device)]] = model.next_path(
                act[torch.as_tensor(taken_rows, device=device)], g[rows_t[torch.as_tensor(idx, device=device)]]
            )
            paths = paths.copy()
            paths[rows[idx], step + 1] = tables.target[cand[idx, 0]]
    if log_z:
        stats.log_z = float(torch.cat(log_z).mean())
    return total / max(stats.states, 1), stats
