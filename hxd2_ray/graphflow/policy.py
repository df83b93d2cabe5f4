"""A trained GraphFlow policy: its network, the features it walks with, and the fingerprint that ties it to one index.

On disk (``POLICY_DIR``)::

    policy.json   format, fingerprint, the index's fingerprint and walk-graph hash, the feature embedder, the
                  training configuration (the fields that shape a policy), the task, the training summary
    policy.pt     the trained parameters (heads; with ``encoder: lora`` the adapters too)

The fingerprint hashes the index fingerprint, the walk-graph hash, the feature embedder and the training
configuration. :func:`load_policy` refuses a policy whose index fingerprint or graph hash differs from the index
it is given (:class:`~hxd2_ray.errors.IndexMismatchError` naming both), and a policy whose feature embedder is not
the one given.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch  # noqa: TID253 - a torch module: imported only by code that trains or walks

from hxd2_ray.atomic_write import replace_local_file
from hxd2_ray.config import GraphFlowConfig
from hxd2_ray.errors import HxdError, IndexMismatchError, IndexNotFoundError
from hxd2_ray.graphflow.encoder import LoraQuestionEncoder
from hxd2_ray.graphflow.features import GraphFeatures, embed_normalized, question_features
from hxd2_ray.graphflow.model import FeatureTables, GraphFlowModel

__all__ = [
    "POLICY_FORMAT_VERSION",
    "GraphFlowPolicy",
    "PolicyMeta",
    "build_policy",
    "load_policy",
    "policy_fingerprint",
    "save_policy",
]

POLICY_FORMAT_VERSION = 1
POLICY_JSON = "policy.json"
POLICY_PT = "policy.pt"


@dataclass(frozen=True)
class PolicyMeta:
    fingerprint: str
    index_fingerprint: str
    graph_hash: str
    embedder_id: str
    dim: int
    kind: str  # kgqa | passages
    config: dict[str, Any]  # GraphFlowConfig.fingerprint_fields() of the training run
    format_version: int = POLICY_FORMAT_VERSION
    summary: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            k: getattr(self, k)
            for k in (
                "format_version",
                "fingerprint",
                "index_fingerprint",
                "graph_hash",
                "embedder_id",
                "dim",
                "kind",
                "config",
                "summary",
            )
        }


def policy_fingerprint(
    index_fingerprint: str, graph_hash: str, embedder_id: str, dim: int, kind: str, config: Mapping[str, Any]
) -> str:
    """``config``: the training settings as recorded (:meth:`GraphFlowConfig.fingerprint_fields` when trained)."""
    ident = {
        "index": index_fingerprint,
        "graph": graph_hash,
        "embedder": [embedder_id, dim],
        "kind": kind,
        "config": dict(config),
        "format": POLICY_FORMAT_VERSION,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class GraphFlowPolicy:
    """A policy ready to walk: network, feature tensors, the config it was trained with, its meta."""

    model: GraphFlowModel
    tables: FeatureTables
    features: GraphFeatures
    train_cfg: GraphFlowConfig
    meta: PolicyMeta
    encoder: Any = None  # LoraQuestionEncoder with encoder=lora

    def parameters(self) -> list[torch.nn.Parameter]:
        params = list(self.model.parameters())
        if self.encoder is not None:
            params += [p for p in self.encoder.parameters() if p.requires_grad]
        return params

    def question_tables(
        self, policy_vectors: torch.Tensor | None, texts: Sequence[str] | None, plain_vectors: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(qh, qfull): the projected question features and the raw unit vectors, row per question. Frozen
        encoder: from ``policy_vectors``; LoRA: from ``texts``."""
        if self.encoder is not None:
            if texts is None:
                raise ValueError("a LoRA policy encodes question texts; none given")
            return self.model.encode_question(self.encoder(texts)), plain_vectors
        if policy_vectors is None:
            raise ValueError("a frozen-encoder policy needs the questions' vectors")
        return self.model.encode_question(policy_vectors), plain_vectors

    def embed_questions(
        self, embedder: Any, policy_texts: Sequence[str], plain_texts: Sequence[str]
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Question vectors with the feature embedder: (policy-text vectors or None for LoRA, plain vectors)."""
        device = self.tables.device
        plain = torch.as_tensor(embed_normalized(embedder, list(plain_texts)), device=device)
        if self.encoder is not None:
            return None, plain
        segments = self.train_cfg.question_segments
        if segments == 0 and list(policy_texts) == list(plain_texts):
            return plain, plain
        return torch.as_tensor(question_features(embedder, list(policy_texts), segments), device=device), plain

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"model": {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}}
        if self.encoder is not None:
            state["encoder"] = self.encoder.adapter_state()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        if self.encoder is not None:
            self.encoder.load_adapter_state(state["encoder"])


def build_policy(
    features: GraphFeatures,
    cfg: GraphFlowConfig,
    kind: str,
    index_fingerprint: str,
    device: str = "cpu",
    *,
    encoder: Any = None,
) -> GraphFlowPolicy:
    """A fresh (untrained) policy over ``features``; parameters initialised from ``cfg.seed``."""
    torch.manual_seed(cfg.seed)
    if cfg.encoder == "lora" and encoder is None:
        encoder = LoraQuestionEncoder(
            cfg.lora_model, rank=cfg.lora_rank, alpha=cfg.lora_alpha, max_length=cfg.lora_max_length
        )
    question_dim = encoder.out_dim if encoder is not None else features.dim * (1 + cfg.question_segments)
    model = GraphFlowModel(
        features.dim, question_dim, cfg.hidden_dim, cfg.max_steps, output_scale=max(1.0, -cfg.miss_log_reward / 4)
    ).to(device)
    if encoder is not None:
        encoder.to(device)
    meta = PolicyMeta(
        fingerprint=policy_fingerprint(
            index_fingerprint, features.graph_hash, features.embedder_id, features.dim, kind, cfg.fingerprint_fields()
        ),
        index_fingerprint=index_fingerprint,
        graph_hash=features.graph_hash,
        embedder_id=features.embedder_id,
        dim=features.dim,
        kind=kind,
        config=cfg.fingerprint_fields(),
    )
    return GraphFlowPolicy(
        model=model,
        tables=FeatureTables.from_features(features, device),
        features=features,
        train_cfg=cfg,
        meta=meta,
        encoder=encoder,
    )


def save_policy(
    policy: GraphFlowPolicy,
    output_dir: str | os.PathLike[str],
    state: Mapping[str, Any] | None = None,
    summary: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``policy.pt`` (``state``, default: the policy's current parameters) and ``policy.json`` last."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = PolicyMeta(**{**policy.meta.to_dict(), "summary": dict(summary or policy.meta.summary)})
    replace_local_file(out / POLICY_PT, lambda p: torch.save(dict(state or policy.state_dict()), p))
    body = json.dumps(meta.to_dict(), indent=2, sort_keys=True, ensure_ascii=False, default=str)
    replace_local_file(out / POLICY_JSON, lambda p: Path(p).write_text(body + "\n", encoding="utf-8"))
    return out


def read_policy_meta(policy_dir: str | os.PathLike[str]) -> PolicyMeta:
    path = Path(policy_dir) / POLICY_JSON
    if not path.exists():
        raise IndexNotFoundError(
            f"no {POLICY_JSON} in {policy_dir}: not a trained GraphFlow policy (train one with hxd2 graphflow train)"
        )
    raw = json.loads(path.read_text(encoding="utf-8"))
    if int(raw.get("format_version", 0)) > POLICY_FORMAT_VERSION:
        raise IndexMismatchError(
            f"policy at {policy_dir} has format {raw['format_version']}, newer than this "
            f"hxd2_ray reads ({POLICY_FORMAT_VERSION})"
        )
    return PolicyMeta(**{k: raw[k] for k in PolicyMeta.__dataclass_fields__ if k in raw})


def check_policy_matches(
    meta: PolicyMeta, policy_dir: str | os.PathLike[str], index_fingerprint: str, features: GraphFeatures
) -> None:
    if meta.index_fingerprint != index_fingerprint or meta.graph_hash != features.graph_hash:
        raise IndexMismatchError(
            f"the GraphFlow policy at {policy_dir} was trained on another index (index fingerprint "
            f"{meta.index_fingerprint}, graph {meta.graph_hash}) than the one given (index fingerprint "
            f"{index_fingerprint}, graph {features.graph_hash}); train a policy for this index with "
            "hxd2 graphflow train --index ..."
        )
    if meta.embedder_id != features.embedder_id or meta.dim != features.dim:
        raise IndexMismatchError(
            f"the GraphFlow policy at {policy_dir} was trained with feature embedder {meta.embedder_id!r} (dim "
            f"{meta.dim}) but the features given come from {features.embedder_id!r} (dim {features.dim}); set "
            "graphflow.feature_embedding to the policy's embedder"
        )


def load_policy(
    policy_dir: str | os.PathLike[str], features: GraphFeatures, index_fingerprint: str, device: str = "cpu"
) -> GraphFlowPolicy:
    """The policy at ``policy_dir`` over ``features`` (of the index whose manifest fingerprint is given),
    refused when it was trained on another index or with another feature embedder."""
    meta = read_policy_meta(policy_dir)
    check_policy_matches(meta, policy_dir, index_fingerprint, features)
    try:
        train_cfg = GraphFlowConfig(**meta.config)
    except ValueError as exc:
        raise HxdError(f"policy at {policy_dir} has an unreadable training config: {exc}") from None
    policy = build_policy(features, train_cfg, meta.kind, index_fingerprint, device)
    # From the settings as recorded: one trained before a setting existed lacks it (its default trains as before)
    recorded = policy_fingerprint(
        index_fingerprint, features.graph_hash, features.embedder_id, features.dim, meta.kind, meta.config
    )
    if recorded != meta.fingerprint:
        raise IndexMismatchError(
            f"policy at {policy_dir} has fingerprint {meta.fingerprint} but recomputes to "
            f"{recorded}: written by another hxd2_ray version; retrain it"
        )
    state = torch.load(Path(policy_dir) / POLICY_PT, map_location=device, weights_only=True)
    policy.load_state_dict(state)
    policy.meta = meta
    policy.model.eval()
    return policy


def numpy_rng(*seed: int) -> np.random.Generator:
    return np.random.default_rng([abs(int(s)) for s in seed])
