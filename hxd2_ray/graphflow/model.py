"""The GraphFlow network: a state encoder, a policy head over every action from the current node, a flow head.

A state s_t is (question, current node, path so far, step). Its encoding::

    g_0     = tanh(W [q ; node(start)])                   q: question feature, projected
    g_{t+1} = GRUCell(act(a_t), g_t)                      the path: every move taken so far
    h(s_t)  = MLP([g_t ; q ; q * g_t ; node(u_t) + x(s_t) ; step_t])

``node(u)`` projects the node's cached vector and its type's; ``act(a)`` = relu of the projected relation
signature's cached ``[out | in | none]`` vector, the target's ``node(v)`` and four action features (target already
on the path, target is the start, question-target cosine, log degree). Scores:
``r(s, a) = <S h(s), act(a)> / sqrt(H) + b . act(a)`` for a move,
``r(s, STOP) = MLP_stop(h(s))``; the policy is their softmax over the actions of the node (during training, over
the k+1 local candidates: see :mod:`hxd2_ray.graphflow.objective`). ``log F(s) = MLP_flow(h(s))``.

The big tables (node, type and signature vectors) live in :class:`FeatureTables`, outside the module, so
data-parallel training broadcasts only the heads' parameters. Plain torch; imported only by code that trains or
walks.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch  # noqa: TID253 - a torch module: imported only by code that trains or walks
from torch import nn  # noqa: TID253

__all__ = ["ACTION_FEATURES", "FeatureTables", "GraphFlowModel"]

ACTION_FEATURES = 4  # on path, is start, question cosine, log degree
STATE_FEATURES = 3  # question cosine of the current node, current node is a chunk, step / max_steps


@dataclass
class FeatureTables:
    """The walk graph's arrays and features as tensors (read-only; shared by the heads and the sampler)."""

    node_vectors: torch.Tensor  # [N, dim]
    node_type: torch.Tensor  # [N] long
    type_vectors: torch.Tensor  # [T, dim]
    sig_vectors: torch.Tensor  # [S, 3 dim]
    log_degree: torch.Tensor  # [N]
    is_chunk: torch.Tensor  # [N] float
    ptr: np.ndarray  # CSR, numpy (sampling side)
    target: np.ndarray
    sig: np.ndarray
    target_t: torch.Tensor  # [E] long
    sig_t: torch.Tensor  # [E] long

    @classmethod
    def from_features(cls, feats: Any, device: str | torch.device = "cpu") -> "FeatureTables":
        g = feats.graph
        deg = np.diff(g.ptr).astype(np.float32)
        is_chunk = np.zeros(g.n_nodes, dtype=np.float32)
        is_chunk[g.n_entities :] = 1.0
        return cls(
            node_vectors=_table(feats.node_vectors, device),
            node_type=torch.as_tensor(g.node_type.astype(np.int64), device=device),
            type_vectors=_table(feats.type_vectors, device),
            sig_vectors=_table(feats.sig_vectors, device),
            log_degree=torch.as_tensor(np.log1p(deg) / 8.0, device=device),
            is_chunk=torch.as_tensor(is_chunk, device=device),
            ptr=g.ptr,
            target=g.target,
            sig=g.sig,
            target_t=torch.as_tensor(g.target.astype(np.int64), device=device),
            sig_t=torch.as_tensor(g.sig.astype(np.int64), device=device),
        )

    @property
    def dim(self) -> int:
        return int(self.node_vectors.shape[1])

    @property
    def device(self) -> torch.device:
        return self.node_vectors.device


def _table(vectors: np.ndarray, device: str | torch.device) -> torch.Tensor:
    """A float32 tensor of cached vectors. The feature cache hands them out memory-mapped read-only; on the CPU the
    tensor shares that map (nothing here writes into a table), so torch's warning about a non-writable array is
    silenced here rather than paid for with a private copy of every vector in every process."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)
        return torch.as_tensor(np.asarray(vectors, dtype=np.float32), device=device)


class GraphFlowModel(nn.Module):  # type: ignore[misc]  # torch is not followed by mypy: Module is Any
    """Policy and flow heads over cached features. ``question_dim``: width of the question feature (the
    embedder's dimension, or the LoRA encoder's hidden size)."""

    def __init__(self, dim: int, question_dim: int, hidden: int, max_steps: int, output_scale: float = 1.0):
        super().__init__()
        H = hidden
        self.max_steps = max_steps
        # Flows and scores must reach the reward's range (log R of a miss is -15): scaling the heads' outputs lets
        # them get there in hundreds of optimiser steps instead of thousands (Adam moves each weight by ~lr).
        self.output_scale = float(output_scale)
        self._scale = float(hidden) ** -0.5 * self.output_scale
        self.question = nn.Sequential(nn.Linear(question_dim, H), nn.Tanh())
        self.node_proj = nn.Linear(dim, H)
        self.type_proj = nn.Linear(dim, H, bias=False)
        self.sig_proj = nn.Linear(3 * dim, H)
        self.action_extra = nn.Linear(ACTION_FEATURES, H, bias=False)
        self.state_extra = nn.Linear(STATE_FEATURES, H, bias=False)
        self.step = nn.Embedding(max_steps + 2, H)
        self.init = nn.Linear(2 * H, H)
        self.path = nn.GRUCell(H, H)
        self.state = nn.Sequential(nn.Linear(5 * H, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU())
        self.score_state = nn.Linear(H, H)
        self.score_bias = nn.Linear(H, 1)
        self.stop = nn.Sequential(nn.Linear(H, H), nn.ReLU(), nn.Linear(H, 1))
        self.flow = nn.Sequential(nn.Linear(H, H), nn.ReLU(), nn.Linear(H, 1))

    # ------------------------------------------------------------------------------------------ pieces

    def encode_question(self, q: torch.Tensor) -> torch.Tensor:
        return self.question(q)

    def node(self, t: FeatureTables, nodes: torch.Tensor) -> torch.Tensor:
        """node(u) for ``nodes``; each distinct node projected once (a hub's neighbours repeat across states)."""
        uniq, inv = torch.unique(nodes, return_inverse=True)
        proj = self.node_proj(t.node_vectors[uniq]) + self.type_proj(t.type_vectors)[t.node_type[uniq]]
        return proj[inv]

    def initial_path(self, t: FeatureTables, qh: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.init(torch.cat([qh, self.node(t, start)], dim=-1)))

    def state_repr(
        self,
        t: FeatureTables,
        g: torch.Tensor,
        qh: torch.Tensor,
        qfull: torch.Tensor,
        node: torch.Tensor,
        step: torch.Tensor,
    ) -> torch.Tensor:
        """h(s) for paths ``g``, questions ``qh`` (projected) / ``qfull`` (raw unit vectors), current nodes, steps."""
        cos = (qfull * t.node_vectors[node]).sum(-1, keepdim=True)
        extra = torch.cat([cos, t.is_chunk[node].unsqueeze(-1), (step.float() / self.max_steps).unsqueeze(-1)], dim=-1)
        # q * g: the question times the path, so a flow can depend on which relation was taken for which question
        x = torch.cat([g, qh, qh * g, self.node(t, node) + self.state_extra(extra), self.step(step)], dim=-1)
        return self.state(x)

    def action_repr(
        self,
        t: FeatureTables,
        entries: torch.Tensor,
        question: torch.Tensor,
        qfull: torch.Tensor,
        on_path: torch.Tensor,
        is_start: torch.Tensor,
    ) -> torch.Tensor:
        """act(a) for CSR ``entries``; ``question[i]`` is entry i's row of the raw question vectors ``qfull``.
        Signatures, nodes and question-node cosines are computed once per distinct value."""
        target = t.target_t[entries]
        sigs, sig_inv = torch.unique(t.sig_t[entries], return_inverse=True)
        nodes, node_inv = torch.unique(target, return_inverse=True)
        qs, q_inv = torch.unique(question, return_inverse=True)
        cos = (t.node_vectors[nodes] @ qfull[qs].T)[node_inv, q_inv]
        node = self.node_proj(t.node_vectors[nodes]) + self.type_proj(t.type_vectors)[t.node_type[nodes]]
        extra = torch.stack([on_path.float(), is_start.float(), cos, t.log_degree[target]], dim=-1)
        return torch.relu(self.sig_proj(t.sig_vectors[sigs])[sig_inv] + node[node_inv] + self.action_extra(extra))

    def move_scores(self, h: torch.Tensor, act: torch.Tensor, state_of: torch.Tensor) -> torch.Tensor:
        """r(s, a) = <S h(s), act(a)> / sqrt(H) + b . act(a) for each action row, ``state_of[i]`` its state's row in
        ``h``: a bilinear form, so a hub's thousands of actions cost a dot product each."""
        query = self.score_state(h)[state_of]
        return (query * act).sum(-1) * self._scale + self.score_bias(act).squeeze(-1) * self.output_scale

    def stop_score(self, h: torch.Tensor) -> torch.Tensor:
        return self.stop(h).squeeze(-1) * self.output_scale

    def log_flow(self, h: torch.Tensor) -> torch.Tensor:
        return self.flow(h).squeeze(-1) * self.output_scale

    def next_path(self, act: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return self.path(act, g)
