"""The Serve deployments: the query flow's parts as a graph of deployments behind one HTTP ingress.

Request flow (``serve.app:build_app`` wires it)::

    HTTP ─► proxy ─► Ingress (serve.api: auth, limits, text validation, OpenAI shapes, SSE)
                       │ handle: answer / answer_stream (index, question, trace, deadline, mode),
                       │         index_view (a chunk, the graph around entities, statistics: the web UI's reads)
                       ▼
                     Retriever ×N: opens every index read-only and runs THE query flow
                       │          (hxd2_ray.wiring.build_pipeline, the CLI's and the evaluation job's object),
                       │          in worker threads; dual-level retrieval and the budgeted prompt happen here
                       ├─► Planner ×N    plan(question)            LogicFormPlanner ─┐
                       ├─► PlanExecutor  execute(index, plan)      LogicFormExecutor │ (its own index copies)
                       ├─► Verifier ×N   verify(question, evidence, mode)            ├─► LLM (AsyncVllmEngine:
                       ├─► GraphWalker   retrieve(index, question)  GraphFlow policy  │   continuous batching,
                       ├─► Embedder      embed(texts), @serve.batch                   │   streaming, abort)
                       └─► LLM           complete / stream (keywords, answers) ◄──────┘

The flow reaches every part through the seams of :mod:`hxd2_ray.retrieval.parts` (and the LLM/Embedder seams);
here those are handle adapters (:mod:`serve.handles`), in the CLI the library objects themselves, so the
orchestration is one object in both places. The GraphWalker deployment exists only when the config names a
GraphFlow policy (``graphflow.policy``). ``args.parts: in_replica`` builds the parts inside each Retriever
replica instead; ``args.embedder: in_replica`` embeds there too (a CPU embedder: the hop costs more than batching
across requests saves). Each deployment's replicas, ``max_ongoing_requests`` and autoscaling are in
``configs/serve.yaml`` (and ``cluster/kuberay/rayservice.yaml``).

How streaming flows: vLLM ``AsyncLLM.generate`` (DELTA outputs) ─► ``LLM.stream`` (async generator) ─► Serve
streaming handle ─► ``HandleLLM.stream`` (sync iterator in the flow's thread) ─► the flow's ``answer_stream``
events ─► a queue into the Retriever's event loop ─► ``Retriever.answer_stream`` (async generator) ─► Serve
streaming handle ─► Ingress SSE ``data: {chunk}`` lines ─► client. When the client hangs up, each step cancels
the one below it, down to ``AsyncLLM.abort``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import importlib
import logging
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Sequence

import numpy as np
from ray import serve

from hxd2_ray.config import HxdConfig, validate_config
from hxd2_ray.errors import IndexNotFoundError
from hxd2_ray.llm.base import LLMRequest, LLMResponse
from hxd2_ray.retrieval.live_index import DEFAULT_POLL_S
from serve.api import ApiSettings, RetrieverBackend, _error, answer_payload, error_of, make_api
from serve.handles import (
    DeadlineExceeded,
    HandleEmbedder,
    HandleGraphRetriever,
    HandleLLM,
    HandlePlanExecutor,
    HandlePlanner,
    HandleVerifier,
    RequestScope,
    cancel_soon,
    over,
    run_in_thread,
)
from serve.index_views import IndexViews, NotInIndex
from serve.live_indexes import close_live, corpus_root, live_of, open_live, public_references
from serve.metrics import TIMING_PHASES, Metrics, replica_max_ongoing

log = logging.getLogger("hxd2.serve")


# ========================================================================================== flow wiring


@dataclass
class PipelineContext:
    """What a pipeline factory gets inside a Retriever replica: one open index, the adapters, the parts."""

    index_name: str
    index: Any  # hxd2_ray.retrieval.OpenIndex
    llm: HandleLLM
    embedder: Any  # HandleEmbedder, or the embedder itself when args.embedder is in_replica
    cfg: HxdConfig
    parts: Any = None  # FlowParts of handle adapters; None: the parts run in this replica
    mode: str = "auto"  # the default mode of a request that names none


def embedder_for(handle: Any, cfg: HxdConfig) -> Any:
    """The Embedder deployment behind its adapter, or (no handle: ``args.embedder`` is in_replica) the configured
    embedder built in this replica."""
    if handle is None:
        from hxd2_ray.wiring import build_embedder

        return build_embedder(cfg.embedding)
    return HandleEmbedder(handle, cfg.embedding)


def default_pipeline(ctx: PipelineContext) -> Any:
    """The query flow, exactly as the CLI and the evaluation job build it."""
    from hxd2_ray.wiring import build_pipeline

    return build_pipeline(ctx.mode, ctx.index, ctx.llm, ctx.embedder, ctx.cfg, ctx.parts)


def flow_parts(
    handles: dict[str, Any] | None,
    index_name: str,
    index: Any = None,
    embedder: Any = None,
    cfg: HxdConfig | None = None,
) -> Any:
    """The flow's parts as adapters over the part deployments' handles (None: build them in this replica). The
    GraphFlow retriever is there only when ``cfg`` (the index's, see :func:`configs_per_index`) has a policy: an
    adapter over the GraphWalker deployment (``handles["walker"]``), or, in an app bound without one, the
    retriever itself built in this replica."""
    if not handles:
        return None
    from hxd2_ray.retrieval.parts import FlowParts

    verifier = handles["verifier"]
    return FlowParts(
        planner=HandlePlanner(handles["planner"]),
        executor=HandlePlanExecutor(handles["executor"], index_name),
        verifiers={mode: HandleVerifier(verifier, mode) for mode in ("pre", "post")},
        graph_retriever=_graph_retriever(handles, index_name, index, embedder, cfg),
    )


def _graph_retriever(handles: dict[str, Any], index_name: str, index: Any, embedder: Any, cfg: HxdConfig | None) -> Any:
    if cfg is None or cfg.graphflow.policy is None:
        return None  # mode graphflow then says it needs a policy
    if handles.get("walker") is not None:
        return HandleGraphRetriever(handles["walker"], index_name)
    if index is None:
        return None
    from hxd2_ray.wiring import build_graph_retriever

    return build_graph_retriever(index, embedder, cfg)


def configs_per_index(cfg: HxdConfig, indexes: dict[str, Any]) -> dict[str, HxdConfig]:
    """The config each served index is queried with. A GraphFlow policy (``graphflow.policy``) is trained for one
    index: the others are served without it (their mode graphflow says it needs a policy); a policy that belongs
    to none of them is an error, as it is for the CLI."""
    policy = cfg.graphflow.policy
    if policy is None or len(indexes) < 2:
        return {name: cfg for name in indexes}
    from hxd2_ray.errors import IndexMismatchError
    from hxd2_ray.graphflow.policy import read_policy_meta

    owner = read_policy_meta(policy).index_fingerprint
    mine = [name for name, index in indexes.items() if index.manifest.fingerprint == owner]
    if not mine:
        raise IndexMismatchError(
            f"the GraphFlow policy at {policy} was trained on index {owner}, none of the served "
            f"indexes ({', '.join(indexes)}); train one with hxd2 graphflow train --index ..."
        )
    without = cfg.model_copy(update={"graphflow": cfg.graphflow.model_copy(update={"policy": None})})
    log.info("GraphFlow policy %s serves index %s only", policy, ", ".join(mine))
    return {name: cfg if name in mine else without for name in indexes}


@dataclass(frozen=True)
class _Manifested:
    """What :func:`configs_per_index` reads of an index (its manifest), without opening (or copying) it."""

    manifest: Any


def _manifests(locations: dict[str, str], cfg: HxdConfig) -> dict[str, _Manifested]:
    from hxd2_ray.indexing.manifest import read_manifest
    from hxd2_ray.ingest.sources import resolve_filesystem

    out = {}
    for name, location in locations.items():
        fs, path = resolve_filesystem(location, cfg.s3)
        out[name] = _Manifested(read_manifest(path, filesystem=fs))
    return out


@dataclass
class _Served:
    """What a Retriever replica reads one generation of an index through."""

    pipeline: Any
    corpus_root: str  # the folder every local document lies under: answers name documents relative to it

    def close(self) -> None:
        close = getattr(self.pipeline, "close", None)
        if callable(close):
            close()


def import_string(path: str) -> Callable[..., Any]:
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"import path {path!r} must look like 'package.module:function'")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def fallback_kind(reason: str | None) -> str | None:
    """A bounded label for the fallbacks metric: the reason up to its first colon ("plan failed", "timeout", "the
    pre-check verifier said no")."""
    if not reason:
        return None
    return reason.split(":", 1)[0].strip()[:48] or "fallback"


# ========================================================================================== LLM


@serve.deployment(
    name="LLM",
    max_ongoing_requests=64,
    ray_actor_options={"num_cpus": 0.25},
    health_check_period_s=10,
    health_check_timeout_s=60,
)
class LLMServer:
    """The generation engine: vLLM's async engine (continuous batching over every in-flight request, streaming,
    abort on disconnect), or the scripted fake (``llm.backend: scripted``) for tests and load tests."""

    def __init__(self, llm_cfg: dict[str, Any], scripted: dict[str, Any] | None = None):
        from pydantic import TypeAdapter

        from hxd2_ray.config import LLMConfig, OpenAILLMConfig, ScriptedLLMConfig

        cfg = TypeAdapter(LLMConfig).validate_python(llm_cfg)
        if isinstance(cfg, ScriptedLLMConfig):
            from hxd2_ray.llm.scripted_async import ScriptedAsyncEngine, ScriptedLatency

            self.backend: Any = ScriptedAsyncEngine(cfg, ScriptedLatency(**(scripted or {})))
        elif isinstance(cfg, OpenAILLMConfig):
            from hxd2_ray.llm.openai_backend import OpenAIAsyncEngine

            self.backend = OpenAIAsyncEngine(cfg)  # a client of a remote server: no engine in this replica
        else:
            from hxd2_ray.llm.vllm_async import AsyncVllmEngine

            self.backend = AsyncVllmEngine(cfg)
        self.kind = cfg.backend
        self.metrics = Metrics()

    async def complete(self, requests: list[LLMRequest]) -> list[LLMResponse]:
        try:
            out = await self.backend.complete(requests)
        except Exception:
            self.metrics.llm_requests.inc(len(requests), tags={"kind": "complete", "outcome": "error"})
            raise
        failed = sum(1 for r in out if r.error)
        if failed:
            self.metrics.llm_requests.inc(failed, tags={"kind": "complete", "outcome": "error"})
        if len(out) - failed:
            self.metrics.llm_requests.inc(len(out) - failed, tags={"kind": "complete", "outcome": "ok"})
        return out

    async def stream(self, request: LLMRequest) -> AsyncIterator[str]:
        started = time.perf_counter()
        first = True
        outcome = "aborted"
        try:
            async for delta in self.backend.stream(request):
                if first:
                    first = False
                    self.metrics.llm_ttft.observe((time.perf_counter() - started) * 1000)
                yield delta
            outcome = "ok"
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except Exception:
            outcome = "error"
            raise
        finally:
            self.metrics.llm_requests.inc(tags={"kind": "stream", "outcome": outcome})

    async def stats(self) -> dict[str, Any]:
        return self.backend.snapshot()

    async def check_health(self) -> None:
        await self.backend.check_health()

    def __del__(self) -> None:
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()


# ===================================================================================== embedder


@serve.deployment(name="Embedder", max_ongoing_requests=64, ray_actor_options={"num_cpus": 0.25})
class EmbedderServer:
    """Query embeddings, batched across every caller with ``@serve.batch`` (one model call per batch)."""

    def __init__(self, emb_cfg: dict[str, Any], batch: dict[str, Any] | None = None):
        from pydantic import TypeAdapter

        from hxd2_ray.config import EmbeddingConfig
        from hxd2_ray.wiring import build_embedder

        cfg = TypeAdapter(EmbeddingConfig).validate_python(emb_cfg)
        self.embedder = build_embedder(cfg)
        self.cfg = cfg
        self.metrics = Metrics()
        self.batches = 0
        batch = batch or {}
        if "max_batch_size" in batch:
            self._embed_batch.set_max_batch_size(int(batch["max_batch_size"]))
        if "batch_wait_timeout_s" in batch:
            self._embed_batch.set_batch_wait_timeout_s(float(batch["batch_wait_timeout_s"]))

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.001)  # type: ignore[untyped-decorator]  # Serve's is
    async def _embed_batch(self, batches: list[list[str]]) -> list[np.ndarray]:
        flat = [t for texts in batches for t in texts]
        self.batches += 1
        self.metrics.embed_batch.observe(len(flat))
        # Hashing is microseconds; a model is not: off the loop either way, so the replica keeps accepting.
        vectors = await asyncio.to_thread(self.embedder.embed, flat)
        out, start = [], 0
        for texts in batches:
            out.append(vectors[start : start + len(texts)])
            start += len(texts)
        return out

    async def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.cfg.dim), dtype=np.float32)
        return await self._embed_batch(list(texts))

    async def info(self) -> dict[str, Any]:
        return {"model_id": self.embedder.model_id, "dim": self.embedder.dim, "batches": self.batches}


# ===================================================================================== retriever


@serve.deployment(
    name="Retriever",
    max_ongoing_requests=16,
    max_queued_requests=64,
    ray_actor_options={"num_cpus": 0.5},
    health_check_period_s=10,
)
class Retriever:
    """Orchestrates every query: the query flow over the read-only indexes, in worker threads; its parts are calls
    to the part deployments (or in-replica objects with ``args.parts: in_replica``)."""

    def __init__(
        self,
        cfg_json: dict[str, Any],
        indexes: dict[str, str],
        llm: Any,
        embedder: Any,
        parts: dict[str, Any] | None = None,
        pipeline: str | None = None,
        threads: int = 16,
        mode: str = "auto",
        transport: str = "grpc",
        poll_s: float = DEFAULT_POLL_S,
        source_url_prefix: str | None = None,
    ):
        import sys

        # Pipeline threads hand off to the replica's event loop and the handle router's loop on every step;
        # with the default 5 ms GIL switch interval a busy thread can hold those hand-offs up by milliseconds.
        sys.setswitchinterval(0.0005)
        # One thread per request the replica may hold (a Serve config may raise max_ongoing_requests), and every
        # one of them may be in its logic-form step at once.
        threads = max(threads, replica_max_ongoing() or 0)
        cfg = validate_config(cfg_json, source="serve args")
        ms = cfg.multistage
        self.cfg = cfg.model_copy(
            update={"multistage": ms.model_copy(update={"logic_workers": max(ms.logic_workers, threads)})}
        )
        llm, embedder = over(llm, transport), over(embedder, transport)
        parts = {name: over(handle, transport) for name, handle in (parts or {}).items()}
        self.llm = HandleLLM(llm, self.cfg.llm)
        self.embedder = embedder_for(embedder, self.cfg)
        factory = import_string(pipeline) if pipeline else default_pipeline
        cfgs = configs_per_index(self.cfg, _manifests(indexes, self.cfg))
        self.source_url_prefix = source_url_prefix

        def attach(name: str, index: Any) -> _Served:
            ctx = PipelineContext(
                name,
                index,
                self.llm,
                self.embedder,
                cfgs[name],
                flow_parts(parts, name, index, self.embedder, cfgs[name]),
                mode,
            )
            return _Served(factory(ctx), corpus_root(index.graph))

        # Each index follows its published generations; a request reads the one it pinned, here and in the parts.
        self.lives = open_live(indexes, self.cfg, attach, poll_s=poll_s, detach=_Served.close)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="hxd2-pipeline")
        self.metrics = Metrics()
        self.served = 0
        self.views = IndexViews()  # a chunk, the graph around entities, statistics (the web UI's reads)

    # -- helpers -------------------------------------------------------------------------------------

    def _payload(self, index: str, pinned: Any, answer: Any, trace: bool, seconds: float) -> dict[str, Any]:
        payload = answer_payload(index, answer, trace, seconds)
        payload["generation"] = pinned.generation
        payload["references"] = public_references(
            payload.get("references") or [], pinned.value.corpus_root, self.source_url_prefix
        )
        if isinstance(payload.get("trace"), dict):
            payload["trace"]["generation"] = pinned.generation
        return payload

    def _record(self, index: str, payload: dict[str, Any]) -> None:
        m = self.metrics
        self.served += 1
        m.answers.inc(tags={"index": index, "path": payload["path"]})
        kind = fallback_kind(payload.get("fallback_reason"))
        if kind:
            m.fallbacks.inc(tags={"index": index, "kind": kind})
        if payload.get("refused"):
            m.refusals.inc(tags={"index": index})
        usage = payload.get("usage") or {}
        if usage.get("prompt_tokens"):
            m.prompt_tokens.inc(usage["prompt_tokens"], tags={"index": index})
        if usage.get("completion_tokens"):
            m.completion_tokens.inc(usage["completion_tokens"], tags={"index": index})
        for phase, ms in payload.get("timings_ms", {}).items():
            if phase in TIMING_PHASES:
                m.phase_latency.observe(ms, tags={"phase": phase})

    def _failed(self, index: str, exc: BaseException) -> dict[str, Any]:
        if not isinstance(exc, Exception):
            raise exc  # KeyboardInterrupt, SystemExit
        payload = error_of(exc)
        if payload is None:
            log.error("query on %s failed", index, exc_info=exc)
            payload = _error(500, f"internal error: {type(exc).__name__}: {exc}"[:1000])
        self.metrics.errors.inc(tags={"index": index, "status": str(payload["error"]["status"])})
        return payload

    # -- API -------------------------------------------------------------------------------------------

    async def answer(
        self,
        index: str,
        question: str,
        trace: bool = False,
        deadline: float | None = None,
        mode: str | None = None,
        topic: str | None = None,
    ) -> dict[str, Any]:
        """One whole answer as a JSON-ready dict, or ``{"error": {"status", "message"}}`` for known failures."""
        try:
            live = live_of(self.lives, index)
        except IndexNotFoundError as exc:
            return _error(404, str(exc))
        scope = RequestScope(deadline)
        started = time.perf_counter()

        def pinned_answer() -> tuple[Any, Any]:
            # Pinned in the worker thread, for as long as it reads (a deadline may leave it running a moment).
            with live.pin() as pinned:
                scope.generation = pinned.generation
                return pinned, pinned.value.pipeline.answer(question, mode=mode, topic=topic)

        try:
            pinned, answer = await run_in_thread(self.pool, scope, pinned_answer)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - mapped to a status
            return self._failed(index, exc)
        payload = self._payload(index, pinned, answer, trace, time.perf_counter() - started)
        self._record(index, payload)
        return payload

    async def answer_stream(
        self,
        index: str,
        question: str,
        trace: bool = False,
        deadline: float | None = None,
        mode: str | None = None,
        topic: str | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """``{"type": "delta", "text"}`` events, then one ``{"type": "final", **payload}`` (or ``"error"``)."""
        try:
            live = live_of(self.lives, index)
        except IndexNotFoundError as exc:
            yield {"type": "error", **_error(404, str(exc))}
            return
        scope = RequestScope(deadline)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        started = time.perf_counter()
        pinned: Any = None

        def put(kind: str, item: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (kind, item))

        def pump() -> None:
            with live.pin() as pinned:
                scope.generation = pinned.generation
                put("pinned", pinned)
                events = pinned.value.pipeline.answer_stream(question, mode=mode, topic=topic)
                try:
                    for event in events:
                        if scope.cancelled:
                            break
                        if event.kind != "progress":
                            put("event", event)
                except BaseException as exc:  # noqa: BLE001 - handed to the async side
                    put("error", exc)
                finally:
                    close = getattr(events, "close", None)
                    if callable(close):
                        close()  # a generator stopped early: closes the LLM stream under it (abort)
                    put("end", None)

        task = asyncio.ensure_future(run_in_thread(self.pool, scope, pump))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no "never retrieved" noise
        finished = False
        try:
            while True:
                timeout = None if deadline is None else max(0.0, deadline - time.time())
                try:
                    kind, item = await asyncio.wait_for(queue.get(), timeout)
                except asyncio.TimeoutError:
                    cancel_soon(scope)
                    yield {"type": "error", **self._failed(index, DeadlineExceeded("the request deadline passed"))}
                    finished = True
                    return
                if kind == "pinned":
                    pinned = item
                    continue
                if kind == "end":
                    finished = True
                    return
                if kind == "error":
                    finished = True
                    yield {"type": "error", **self._failed(index, item)}
                    return
                if item.kind == "delta":
                    if item.text:
                        yield {"type": "delta", "text": item.text}
                else:
                    payload = self._payload(index, pinned, item.answer, trace, time.perf_counter() - started)
                    self._record(index, payload)
                    yield {"type": "final", **payload}
        finally:
            if not finished:
                cancel_soon(scope)  # the consumer went away: stop the pipeline and abort the generation
            task.cancel()

    async def index_view(
        self, kind: str, index: str, params: dict[str, Any], deadline: float | None = None
    ) -> dict[str, Any]:
        """A chunk, the graph around entities, or the index's statistics (:mod:`serve.index_views`) as a JSON-ready
        dict, or ``{"error": {"status", "message"}}``: 404 for what the index does not hold."""
        try:
            live = live_of(self.lives, index)
        except IndexNotFoundError as exc:
            return _error(404, str(exc))

        def pinned_view() -> dict[str, Any]:
            with live.pin() as pinned:  # a switch meanwhile cannot close what the view reads
                return self.views.run(kind, index, params, pinned.index)

        try:
            return await run_in_thread(self.pool, RequestScope(deadline), pinned_view)
        except asyncio.CancelledError:
            raise
        except NotInIndex as exc:
            return _error(404, str(exc))
        except BaseException as exc:  # noqa: BLE001 - mapped to a status
            return self._failed(index, exc)

    async def info(self) -> dict[str, Any]:
        current = {name: live.current() for name, live in self.lives.items()}
        return {
            "indexes": {
                name: {
                    "location": p.index.location,
                    "root": str(p.index.root),
                    "fingerprint": p.index.manifest.fingerprint,
                    "embedding_model": p.index.manifest.embedding_model_id,
                    "created_at": p.index.manifest.created_at,
                    "generation": p.generation,
                    "open_generations": self.lives[name].open_generations(),
                }
                for name, p in current.items()
            },
            "served": self.served,
            "modes": {name: list(getattr(p.value.pipeline, "modes", ())) for name, p in current.items()},
        }

    async def reload(self) -> dict[str, Any]:
        """Read every served index's manifest now and switch to a newly published generation (the others replicas
        and the part deployments follow within ``generation_poll_s``, and open a pinned generation on demand)."""
        loop = asyncio.get_running_loop()
        out = {}
        for name, live in self.lives.items():
            out[name] = await loop.run_in_executor(self.pool, live.refresh)
        return {"generations": out}

    def check_health(self) -> None:
        if self.pool._shutdown:  # noqa: SLF001
            raise RuntimeError("the pipeline pool is shut down")

    def __del__(self) -> None:
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        close_live(getattr(self, "lives", {}))


# ======================================================================================= flow parts


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


@serve.deployment(name="Planner", max_ongoing_requests=16, ray_actor_options={"num_cpus": 0.1})
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


@serve.deployment(name="PlanExecutor", max_ongoing_requests=16, ray_actor_options={"num_cpus": 0.1})
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


@serve.deployment(name="Verifier", max_ongoing_requests=16, ray_actor_options={"num_cpus": 0.1})
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


@serve.deployment(name="GraphWalker", max_ongoing_requests=16, ray_actor_options={"num_cpus": 0.1})
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
        cfgs = configs_per_index(cfg, _manifests(indexes, cfg)) if len(indexes) > 1 else {n: cfg for n in indexes}
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


# ===================================================================================== ingress


@serve.deployment(
    name="Ingress",
    max_ongoing_requests=64,
    max_queued_requests=128,
    backpressure_config={"retry_after_s": 1},
    ray_actor_options={"num_cpus": 0.25},
)
@serve.ingress()
class Ingress:
    """HTTP ingress: OpenAI-compatible chat completions (SSE streaming), /v1/query, /v1/models, /healthz, the
    index views (/v1/indexes/...) and the web UI (/ui)."""

    def __init__(self, retriever: Any, settings: dict[str, Any]):
        from serve.auth import ApiKeys, AuthConfigError, load_api_keys

        self.settings = ApiSettings(
            indexes=tuple(settings["indexes"]),
            default_index=settings["default_index"],
            request_deadline_s=float(settings["request_deadline_s"]),
            retry_after_s=int(settings["retry_after_s"]),
            max_body_bytes=int(settings["max_body_bytes"]),
            max_question_chars=int(settings["max_question_chars"]),
            rate_limit_per_key=settings.get("rate_limit_per_key"),
            rate_limit_burst=int(settings.get("rate_limit_burst", 20)),
        )
        self.keys = None
        if settings.get("auth", True):
            keys = load_api_keys(settings.get("api_keys_env"), settings.get("api_keys_file"))
            if not keys:
                raise AuthConfigError(
                    f"auth is on but no API key is configured: set ${settings.get('api_keys_env')} (comma-separated)"
                    " or api_keys_file on the replicas, or set auth: false for a local-only server"
                )
            self.keys = ApiKeys(keys)
            log.info("ingress: %d API key(s) loaded", len(self.keys))
        else:
            log.warning("ingress: auth is OFF (auth: false); bind to 127.0.0.1 only")
        transport = settings.get("transport", "grpc")
        self.backend = RetrieverBackend(over(retriever, transport), self.settings.retry_after_s)
        self.metrics = Metrics()

    def __serve_build_asgi_app__(self) -> Any:
        return make_api(self.backend, self.settings, self.keys, self.metrics)
