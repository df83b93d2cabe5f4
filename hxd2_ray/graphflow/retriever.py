"""GraphFlow as a retriever: question -> start nodes -> M policy trajectories -> ranked targets with their paths.

The object a query pipeline, the evaluation job or a Serve deployment holds (no Ray; thread-safe for
``retrieve``: torch inference under ``no_grad`` over read-only tables)::

    retriever = GraphFlowRetriever.open(index, embedder, "runs/policy_metaqa", cfg.graphflow)
    result = retriever.retrieve("what movies did [Temuera Morrison] act in")
    result.answers()        # KG QA: entity names, best first
    result.passage_ids()    # passage retrieval: document source ids, best first
    result.to_dict()        # for traces

A question with no linkable start node (or a graph walk that reaches nothing) returns an empty result whose
``reason`` says why, so a multi-stage pipeline can move on.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np
import torch  # noqa: TID253 - a torch module: imported only by code that trains or walks

from hxd2_ray.config import GraphFlowConfig
from hxd2_ray.errors import IndexMismatchError
from hxd2_ray.graphflow.evaluation import allowed_nodes, ranking_relations, ranking_signatures
from hxd2_ray.graphflow.features import load_or_build_features
from hxd2_ray.graphflow.inference import Finished, walk
from hxd2_ray.graphflow.linking import LinkedQuestion, StartLinker
from hxd2_ray.graphflow.policy import GraphFlowPolicy, load_policy, read_policy_meta
from hxd2_ray.graphflow.results import GraphFlowResult, PathStep, RankedTarget

__all__ = ["GraphFlowResult", "GraphFlowRetriever", "PathStep", "RankedTarget"]


class GraphFlowRetriever:
    """``index``: an :class:`~hxd2_ray.retrieval.index.OpenIndex`; ``embedder``: the index's embedder (linking);
    ``policy``: a loaded :class:`~hxd2_ray.graphflow.policy.GraphFlowPolicy` of this index; ``cfg``: the
    inference settings (``inference``, ``trajectories``, ``top_k``, linking); ``feature_embedder``: the policy's
    feature embedder when it is not the index's."""

    def __init__(
        self,
        index: Any,
        embedder: Any,
        policy: GraphFlowPolicy,
        cfg: GraphFlowConfig,
        *,
        feature_embedder: Any = None,
        linker: StartLinker | None = None,
    ):
        if policy.meta.index_fingerprint != index.manifest.fingerprint:
            raise IndexMismatchError(
                f"the GraphFlow policy was trained on index {policy.meta.index_fingerprint}, not on {index.location} "
                f"({index.manifest.fingerprint}); train a policy for this index"
            )
        self.index = index
        self.embedder = embedder
        self.feature_embedder = feature_embedder or embedder
        self.policy = policy
        self.cfg = cfg
        self.graph = policy.features.graph
        self.linker = linker or StartLinker.for_index(
            index, self.graph, embedder, cfg.model_copy(update={"mask_topic": policy.train_cfg.mask_topic})
        )
        self.allowed = allowed_nodes(policy, policy.meta.kind)
        self.signatures = ranking_signatures(policy, cfg.ranking)
        self.relations = ranking_relations(policy, cfg.ranking)

    @classmethod
    def open(
        cls,
        index: Any,
        embedder: Any,
        policy_dir: str,
        cfg: GraphFlowConfig,
        *,
        feature_embedder: Any = None,
        device: str = "cpu",
    ) -> "GraphFlowRetriever":
        """Load the policy at ``policy_dir`` for ``index`` (features from the cache, built on a miss); refuses a
        policy trained on another index (:class:`~hxd2_ray.errors.IndexMismatchError`). ``feature_embedder``: the
        policy's feature embedder when it is not the index's (``graphflow.feature_embedding``, built by wiring)."""
        meta = read_policy_meta(policy_dir)
        if meta.index_fingerprint != index.manifest.fingerprint:  # before the features: they may take minutes
            raise IndexMismatchError(
                f"the GraphFlow policy at {policy_dir} was trained on another index (fingerprint "
                f"{meta.index_fingerprint}) than {index.location} ({index.manifest.fingerprint}); train a policy for "
                "this index with hxd2 graphflow train --index ..."
            )
        train_cfg = GraphFlowConfig(**meta.config)
        if feature_embedder is None:
            if train_cfg.feature_embedding is not None:
                raise IndexMismatchError(
                    f"the GraphFlow policy at {policy_dir} was trained with features of its own embedder "
                    f"({meta.embedder_id}); pass that embedder as feature_embedder (graphflow.feature_embedding)"
                )
            feature_embedder = embedder
        features = load_or_build_features(
            index, feature_embedder, cache_dir=cfg.cache_dir, chunk_text_chars=train_cfg.chunk_text_chars
        )
        policy = load_policy(policy_dir, features, index.manifest.fingerprint, device)
        return cls(index, embedder, policy, cfg, feature_embedder=feature_embedder)

    # ------------------------------------------------------------------------------------------ retrieval

    def retrieve(self, question: str, topic: str | None = None, *, top_k: int | None = None) -> GraphFlowResult:
        return self.retrieve_many([question], top_k=top_k, topics=[topic])[0]

    def retrieve_many(
        self,
        questions: Sequence[str],
        *,
        top_k: int | None = None,
        seed: int = 0,
        topics: Sequence[str | None] | None = None,
    ) -> list[GraphFlowResult]:
        """Results for ``questions`` (walked together: one scoring call per step for all of them); ``topics``:
        each question's topic entity where known (the start node, as a ``[bracketed]`` name would be)."""
        started = time.perf_counter()
        given = list(topics) if topics is not None else [None] * len(questions)
        links = [self.linker.link(q, t) for q, t in zip(questions, given, strict=True)]
        t_link = time.perf_counter()
        pv, plain = self.policy.embed_questions(
            self.feature_embedder, [lk.policy_text for lk in links], [lk.question for lk in links]
        )
        t_embed = time.perf_counter()
        with torch.no_grad():
            qh, qfull = self.policy.question_tables(pv, [lk.policy_text for lk in links], plain)
        outcomes = walk(
            self.policy.model,
            self.policy.tables,
            qh,
            qfull,
            [[s.node for s in lk.starts] for lk in links],
            mode=self.cfg.inference,
            width=self.cfg.trajectories,
            max_steps=self.policy.train_cfg.max_steps,
            rng=np.random.default_rng(seed),
            min_prob=self.cfg.beam_min_prob,
            return_to_start=self.policy.train_cfg.return_to_start,
            merge=self.cfg.beam_merge,
        )
        t_walk = time.perf_counter()
        per_question = {
            "link": (t_link - started) * 1000 / len(questions) if questions else 0.0,
            "embed": (t_embed - t_link) * 1000 / len(questions) if questions else 0.0,
            "walk": (t_walk - t_embed) * 1000 / len(questions) if questions else 0.0,
        }
        per_question["total"] = sum(per_question.values())
        k = top_k or self.cfg.top_k
        return [self._result(lk, outcome, k, per_question) for lk, outcome in zip(links, outcomes)]

    def _result(self, link: LinkedQuestion, outcome: Any, k: int, timings: dict[str, float]) -> GraphFlowResult:
        g = self.graph
        skip = frozenset(s.node for s in link.starts) if self.cfg.exclude_starts else frozenset()
        ranked = outcome.ranked(self.allowed, skip, self.signatures, self.relations)
        targets = tuple(self._target(node, score, best) for node, score, best in ranked[:k])
        results = tuple(g.keys[n] for n in outcome.terminals(self.allowed, skip)[: max(k, 20)])
        reason = link.reason
        if link.starts and not targets:
            what = "passage" if self.policy.meta.kind == "passages" else "entity"
            reason = f"the policy's {len(outcome.finished)} trajectories reached no {what}"
        return GraphFlowResult(
            question=link.question,
            targets=targets,
            starts=link.starts,
            results=results,
            reason=reason,
            timings_ms=dict(timings),
        )

    def _target(self, node: int, score: float, best: Finished) -> RankedTarget:
        g = self.graph
        steps = []
        for a, (u, v) in zip(best.actions, zip(best.nodes, best.nodes[1:])):
            steps.append(PathStep(g.names[u], g.describe_entry(a), g.names[v]))
        chunk = g.is_chunk(node)
        return RankedTarget(
            key=g.keys[node],
            name=g.names[node],
            kind="chunk" if chunk else "entity",
            score=score,
            path=tuple(steps),
            source_id=g.chunk_sources[node - g.n_entities] if chunk else "",
        )
