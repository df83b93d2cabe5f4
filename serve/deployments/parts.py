"""The flow's parts as deployments of their own: Planner, PlanExecutor, Verifier and GraphWalker, each over
the library object the CLI uses."""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import time
from typing import Any, Callable, Sequence

from ray import serve

from hxd2_ray.config import validate_config
from hxd2_ray.errors import IndexNotFoundError
from hxd2_ray.retrieval.live_index import DEFAULT_POLL_S
from serve.deployments.wiring import configs_per_index, embedder_for, manifests_of
from serve.handles import (
    HandleLLM,
    RequestScope,
    over,
    run_in_thread,
)
from serve.live_indexes import close_live, live_of, open_live
from serve.metrics import Metrics, replica_max_ongoing
from serve.replica_failures import HEALTH_CHECK_PERIOD_S

log = logging.getLogger("hxd2.serve")


class _Part:
    """What the part deployments share: a thread pool for the library object's sync calls, each bounded by the
    request's deadline (which also bounds the part's own calls to the LLM), and a call counter per outcome."""

    part = ""

    def _setup(self, threads: int) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"hxd2-{self.part}")
        self.metrics = Metrics()
        self.calls = {"ok": 0, "error": 0}

    async def _run(self, deadline: float | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            out = await run_in_thread(self.pool, RequestScope(deadline), functools.partial(fn, *args, **kwargs))
        except BaseException:
            self.calls["error"] += 1
            self.metrics.part_calls.inc(tags={"part": self.part, "outcome": "error"})
            raise
        self.calls["ok"] += 1
        self.metrics.part_calls.inc(tags={"part": self.part, "outcome": "ok"})
        self.metrics.part_latency.observe((time.perf_counter() - started) * 1000, tags={"part": self.part})
        return out

    async def stats(self) -> dict[str, Any]:
        return {"part": self.part, "calls": dict(self.calls)}


@serve.deployment(
    name="Planner",
    max_ongoing_requests=16,
    ray_actor_options={"num_cpus": 0.1},
    health_check_period_s=HEALTH_CHECK_PERIOD_S,
)
class PlannerServer(_Part):
    """``plan(question, language, relations)`` → ``PlanResult``: the logic-form planner over the LLM deployment."""

    part = "planner"

    def __init__(self, cfg_json: dict[str, Any], llm: Any, transport: str = "grpc"):
        from hxd2_ray.wiring import build_planner

        cfg = validate_config(cfg_json, source="serve args")
        self.planner = build_planner(HandleLLM(over(llm, transport), cfg.llm), cfg)
        self._setup(max(16, replica_max_ongoing() or 0))

    async def plan(
        self, question: str, language: str | None = None, relations: Sequence[str] = (), deadline: float | None = None
    ) -> Any:
        return await self._run(deadline, self.planner.plan, question, language=language, relations=tuple(relations))


@serve.deployment(
    name="PlanExecutor",
    max_ongoing_requests=16,
    ray_actor_options={"num_cpus": 0.1},
    health_check_period_s=HEALTH_CHECK_PERIOD_S,
)
class PlanExecutorServer(_Part):
    """``execute(index, plan, question)`` → ``LogicFormEvidence``: the executor over its own read-only copies of
    the indexes (Kùzu allows many read-only openers)."""

    part = "executor"

    def __init__(
        self,
        cfg_json: dict[str, Any],
        indexes: dict[str, str],
        llm: Any,
        embedder: Any,
        transport: str = "grpc",
        poll_s: float = DEFAULT_POLL_S,
    ):
        from hxd2_ray.wiring import build_plan_executor

        cfg = validate_config(cfg_json, source="serve args")
        llm_adapter, emb = HandleLLM(over(llm, transport), cfg.llm), embedder_for(over(embedder, transport), cfg)
        self.lives = open_live(
            indexes, cfg, lambda _name, index: build_plan_executor(index, llm_adapter, emb), poll_s=poll_s
        )
        self._setup(max(16, replica_max_ongoing() or 0))

    async def execute(
        self, index: str, plan: Any, question: str = "", deadline: float | None = None, generation: str | None = None
    ) -> Any:
        """On ``generation``, the one the Retriever pinned for the request (opened here if this replica has not
        switched to it yet, or has already closed it): a request never reads two generations."""
        from hxd2_ray.logic import Plan, validate_plan

        live = live_of(self.lives, index)
        checked = plan if isinstance(plan, Plan) else validate_plan(plan)
        if not isinstance(checked, Plan):
            raise ValueError(f"invalid plan: {checked}")

        def pinned_execute() -> Any:
            with live.pin(generation) as pinned:
                return pinned.value.execute(checked, question)

        return await self._run(deadline, pinned_execute)

    def __del__(self) -> None:
        close_live(getattr(self, "lives", {}))


@serve.deployment(
    name="Verifier",
    max_ongoing_requests=16,
    ray_actor_options={"num_cpus": 0.1},
    health_check_period_s=HEALTH_CHECK_PERIOD_S,
)
class VerifierServer(_Part):
    """``verify(question, evidence, answer, language, mode)`` → ``Verdict``: pre- or post-check over the LLM."""

    part = "verifier"

    def __init__(self, cfg_json: dict[str, Any], llm: Any, transport: str = "grpc"):
        from hxd2_ray.wiring import build_verifiers

        cfg = validate_config(cfg_json, source="serve args")
        self.verifiers = build_verifiers(HandleLLM(over(llm, transport), cfg.llm))
        self._setup(max(16, replica_max_ongoing() or 0))

    async def verify(
        self,
        question: str,
        evidence: Any,
        answer: str | None = None,
        language: str | None = None,
        mode: str = "pre",
        deadline: float | None = None,
    ) -> Any:
        if mode not in self.verifiers:
            raise ValueError(f"verifier mode must be one of {sorted(self.verifiers)}, got {mode!r}")
        return await self._run(deadline, self.verifiers[mode].verify, question, evidence, answer, language=language)


@serve.deployment(
    name="GraphWalker",
    max_ongoing_requests=16,
    ray_actor_options={"num_cpus": 0.1},
    health_check_period_s=HEALTH_CHECK_PERIOD_S,
)
class GraphWalkerServer(_Part):
    """``retrieve(index, question)`` → :class:`~hxd2_ray.graphflow.results.GraphFlowResult`: the GraphFlow retriever of
    ``graphflow.policy`` (``hxd2_ray.wiring.build_graph_retriever``) over its own read-only copy of the index the
    policy was trained on (with several indexes, only that one: :func:`configs_per_index`). Bound by
    ``serve.app:build_app`` only when a policy is configured."""

    part = "walker"

    def __init__(
        self,
        cfg_json: dict[str, Any],
        indexes: dict[str, str],
        embedder: Any,
        transport: str = "grpc",
        poll_s: float = DEFAULT_POLL_S,
    ):
        from hxd2_ray.wiring import build_graph_retriever

        cfg = validate_config(cfg_json, source="serve args")
        # Which index the policy belongs to, from the manifests: the others are neither opened nor copied here.
        cfgs = configs_per_index(cfg, manifests_of(indexes, cfg)) if len(indexes) > 1 else {n: cfg for n in indexes}
        emb = embedder_for(over(embedder, transport), cfg)
        walked = {n: loc for n, loc in indexes.items() if cfgs[n].graphflow.policy is not None}
        self.lives = open_live(
            walked, cfg, lambda name, index: build_graph_retriever(index, emb, cfgs[name]), poll_s=poll_s
        )
        self._setup(max(16, replica_max_ongoing() or 0))

    async def retrieve(
        self,
        index: str,
        question: str,
        deadline: float | None = None,
        topic: str | None = None,
        generation: str | None = None,
    ) -> Any:
        live = self.lives.get(index)
        if live is None or live.current().value is None:
            raise IndexNotFoundError(
                f"no GraphFlow policy for index {index!r}; walked here: {', '.join(self.lives) or 'none'}"
            )

        def pinned_retrieve() -> Any:
            with live.pin(generation) as pinned:
                if pinned.value is None:
                    raise IndexNotFoundError(
                        f"no GraphFlow policy for index {index!r} in generation {pinned.generation}"
                    )
                return pinned.value.retrieve(question, topic)

        return await self._run(deadline, pinned_retrieve)

    async def stats(self) -> dict[str, Any]:
        return {**await super().stats(), "indexes": sorted(self.lives)}

    def __del__(self) -> None:
        close_live(getattr(self, "lives", {}))
