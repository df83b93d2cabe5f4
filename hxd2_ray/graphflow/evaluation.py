"""Score a policy on examples: Hit@1, Hit@5, MRR, Recall@20, Diverse-Recall@20 (and passage recall@k).

The ranking is the terminals by aggregated probability (:meth:`WalkOutcome.ranked`, distinct nodes); the raw
results are the finished trajectories' terminals, most probable first, duplicates kept. Hit@k and MRR read the
ranking; ``recall@20`` and ``diverse_recall@20`` read the raw results (the paper's pair: equal when no gold
target comes back twice, see :mod:`hxd2_ray.evaluation.metrics`); ``ranked_recall@20`` is the distinct ranking's
recall. For passage retrieval, chunks are mapped to their documents (``passage_recall@k`` over source ids, as the
evaluation job scores retrieval). A question without a start node scores 0 everywhere.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch  # noqa: TID253 - a torch module: imported only by code that trains or walks

from hxd2_ray.evaluation import metrics as M
from hxd2_ray.graphflow.examples import Example
from hxd2_ray.graphflow.inference import WalkOutcome, walk
from hxd2_ray.graphflow.policy import GraphFlowPolicy

__all__ = ["EvaluationResult", "evaluate_policy", "ranking_relations", "ranking_signatures", "score_outcome"]

RECALL_K = 20
PASSAGE_KS = (2, 5)


def allowed_nodes(policy: GraphFlowPolicy, kind: str) -> np.ndarray:
    g = policy.features.graph
    mask = np.zeros(g.n_nodes, dtype=bool)
    if kind == "passages":
        mask[g.n_entities :] = True
    else:
        mask[: g.n_entities] = True
    return mask


def ranking_signatures(policy: GraphFlowPolicy, ranking: str) -> np.ndarray | None:
    """The entry -> relation signature array when ``ranking`` is ``path`` and the policy answers with entities;
    None (rank by probability mass) otherwise. Passages keep mass: a multi-hop question's gold passages are
    reached through different chains (one per supporting fact), so no single chain holds its answer set."""
    if ranking not in ("path", "relations", "mass"):
        raise ValueError(f"unknown ranking {ranking!r}; valid: path, relations, mass")
    if ranking == "mass" or policy.meta.kind == "passages":
        return None
    return np.asarray(policy.features.graph.sig)


def ranking_relations(policy: GraphFlowPolicy, ranking: str) -> list[tuple[int, ...]] | None:
    """Signature id -> the ids of the relations it holds, when ``ranking`` is ``relations`` (with entity answers;
    :meth:`WalkOutcome.ranked`); None otherwise."""
    if ranking_signatures(policy, ranking) is None or ranking != "relations":
        return None
    signatures = policy.features.graph.signatures
    ids = {step: i for i, step in enumerate(sorted({step for sig in signatures for step in sig}))}
    return [tuple(ids[step] for step in sig) for sig in signatures]


def score_outcome(
    ranked: Sequence[int],
    results: Sequence[int],
    targets: frozenset[int],
    passages: Sequence[str] | None = None,
    gold_passages: Sequence[str] = (),
) -> dict[str, float]:
    out = {
        "hit@1": M.hit_at_k(ranked, targets, 1),
        "hit@5": M.hit_at_k(ranked, targets, 5),
        "mrr": M.reciprocal_rank(ranked, targets),
        "recall@20": M.results_recall_at_k(results, targets, RECALL_K),
        "diverse_recall@20": M.diverse_recall_at_k(results, targets, RECALL_K),
        "ranked_recall@20": M.diverse_recall_at_k(ranked, targets, RECALL_K),
    }
    if passages is not None and gold_passages:
        for k in PASSAGE_KS:
            out[f"passage_recall@{k}"] = M.recall_at_k(passages, gold_passages, k)
    return out


@dataclass
class EvaluationResult:
    metrics: dict[str, float]
    n: int
    by_hops: dict[str, dict[str, float]] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "metrics": self.metrics, "by_hops": self.by_hops, "seconds": round(self.seconds, 3)}


def _mean(rows: Sequence[dict[str, float]], keys: Sequence[str]) -> dict[str, float]:
    return {k: round(float(np.mean([r[k] for r in rows if k in r])), 4) for k in keys if any(k in r for r in rows)}


def evaluate_policy(
    policy: GraphFlowPolicy,
    examples: Sequence[Example],
    policy_vectors: np.ndarray | None,
    plain_vectors: np.ndarray,
    *,
    mode: str,
    width: int,
    batch: int = 64,
    seed: int = 0,
    min_prob: float = 1e-6,
    exclude_starts: bool = True,
    ranking: str = "path",
    keep_rows: bool = False,
    progress: Callable[[str], None] | None = None,
    merge: bool = False,
) -> EvaluationResult:
    """Walk every example (``batch`` questions per scoring call) and average the metrics; ``*_vectors`` are the
    examples' question vectors (row per example; ``policy_vectors`` None for a LoRA policy); ``exclude_starts``:
    a question's start nodes are not ranked (``graphflow.exclude_starts``); ``ranking``: ``graphflow.ranking``;
    ``merge``: ``graphflow.beam_merge``."""
    started = time.perf_counter()
    kind = policy.meta.kind
    allowed = allowed_nodes(policy, kind)
    signatures = ranking_signatures(policy, ranking)
    relations = ranking_relations(policy, ranking)
    g = policy.features.graph
    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(seed)
    device = policy.tables.device
    policy.model.eval()
    for b in range(0, len(examples), batch):
        part = examples[b : b + batch]
        with torch.no_grad():
            pv = torch.as_tensor(policy_vectors[b : b + batch], device=device) if policy_vectors is not None else None
            qh, qfull = policy.question_tables(
                pv, [e.policy_text for e in part], torch.as_tensor(plain_vectors[b : b + batch], device=device)
            )
        outcomes = walk(
            policy.model,
            policy.tables,
            qh,
            qfull,
            [e.starts for e in part],
            mode=mode,
            width=width,
            max_steps=policy.train_cfg.max_steps,
            rng=rng,
            min_prob=min_prob,
            return_to_start=policy.train_cfg.return_to_start,
            merge=merge,
        )
        for ex, outcome in zip(part, outcomes):
            rows.append(
                _row(
                    ex, outcome, allowed, g, kind, keep_rows, ex.starts if exclude_starts else (), signatures, relations
                )
            )
        if progress is not None and (b // batch) % 20 == 19:
            progress(f"evaluated {len(rows):,}/{len(examples):,} questions")
    keys = list(rows[0]["scores"]) if rows else []
    if kind == "passages":
        keys = sorted({k for r in rows for k in r["scores"]}, key=lambda k: (k.startswith("passage"), k))
    result = EvaluationResult(
        metrics=_mean([r["scores"] for r in rows], keys), n=len(rows), seconds=time.perf_counter() - started
    )
    hops = sorted({r["hops"] for r in rows if r["hops"] is not None})
    for h in hops:
        result.by_hops[f"{h}-hop"] = {
            "n": sum(1 for r in rows if r["hops"] == h),
            **_mean([r["scores"] for r in rows if r["hops"] == h], keys),
        }
    if keep_rows:
        result.rows = rows
    return result


def _row(
    ex: Example,
    outcome: WalkOutcome,
    allowed: np.ndarray,
    g: Any,
    kind: str,
    keep: bool,
    exclude: Sequence[int],
    signatures: np.ndarray | None,
    relations: Sequence[tuple[int, ...]] | None = None,
) -> dict[str, Any]:
    skip = frozenset(int(n) for n in exclude)
    ranked = [n for n, _, _ in outcome.ranked(allowed, skip, signatures, relations)]
    results = outcome.terminals(allowed, skip)
    passages = None
    if kind == "passages":
        passages = list(dict.fromkeys(g.chunk_sources[n - g.n_entities] for n in ranked))
    scores = score_outcome(ranked, results, ex.targets, passages, ex.gold if kind == "passages" else ())
    row: dict[str, Any] = {"id": ex.id, "hops": ex.meta.get("hops"), "scores": scores}
    if keep:
        row["top"] = [g.keys[n] for n in ranked[:5]]
        row["gold"] = list(ex.gold)
    return row
