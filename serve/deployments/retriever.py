"""The Retriever deployment: opens every served index read-only (following its generations) and runs THE query
flow (:func:`hxd2_ray.wiring.build_pipeline`) in worker threads, for answers, streams and the index views."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import Any, AsyncIterator

from ray import serve

from hxd2_ray.config import validate_config
from hxd2_ray.errors import IndexNotFoundError
from hxd2_ray.retrieval.live_index import DEFAULT_POLL_S
from serve.deployments.wiring import (
    PipelineContext,
    ServedIndex,
    configs_per_index,
    default_pipeline,
    embedder_for,
    fallback_kind,
    flow_parts,
    import_string,
    manifests_of,
)
from serve.handles import (
    DeadlineExceeded,
    HandleLLM,
    RequestScope,
    cancel_soon,
    over,
    run_in_thread,
)
from serve.index_views import IndexViews, NotInIndex
from serve.live_indexes import close_live, corpus_root, live_of, open_live, public_references
from serve.metrics import TIMING_PHASES, Metrics
from serve.payloads import AnswerPayload, ErrorPayload, answer_payload, error_of, error_payload
from serve.replica_failures import HEALTH_CHECK_PERIOD_S
from serve.warm_up import warm_up

log = logging.getLogger("hxd2.serve")


@serve.deployment(
    name="Retriever",
    max_ongoing_requests=16,
    max_queued_requests=64,
    ray_actor_options={"num_cpus": 0.5},
    health_check_period_s=HEALTH_CHECK_PERIOD_S,
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
        warm: bool = True,
    ):
        import sys

        # Pipeline threads hand off to the replica's event loop and the handle router's loop on every step;
        # with the default 5 ms GIL switch interval a busy thread can hold those hand-offs up by milliseconds.
        sys.setswitchinterval(0.0005)
        # ``threads`` queries run at once; the rest of the replica's max_ongoing_requests wait in the pool's queue
        # (FIFO, handed a thread the moment one frees, dropped if their deadline passes first). Queued here, not in
        # Serve's router: a router whose replicas are all full polls them again with a backoff of up to 0.5 s, so
        # under overload a freed slot stood idle for a while (2x load: 12.1 answers/s against 14.6 unloaded).
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
        cfgs = configs_per_index(self.cfg, manifests_of(indexes, self.cfg))
        self.source_url_prefix = source_url_prefix

        def attach(name: str, index: Any) -> ServedIndex:
            ctx = PipelineContext(
                name,
                index,
                self.llm,
                self.embedder,
                cfgs[name],
                flow_parts(parts, name, index, self.embedder, cfgs[name]),
                mode,
            )
            return ServedIndex(factory(ctx), corpus_root(index.graph))

        # Each index follows its published generations; a request reads the one it pinned, here and in the parts.
        self.lives = open_live(indexes, self.cfg, attach, poll_s=poll_s, detach=ServedIndex.close)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="hxd2-pipeline")
        self.metrics = Metrics()
        self.served = 0
        self.views = IndexViews()  # a chunk, the graph around entities, statistics (the web UI's reads)
        # Ready means able to answer: one question per index before Serve routes any request here (serve.warm_up).
        self.warm_up_s = warm_up(self.lives, self.pool, self._warm_up_failed) if warm else {}

    def _warm_up_failed(self, index: str, exc: BaseException) -> None:
        log.warning("warm-up of %s failed (%s: %s); its first requests pay the start", index, type(exc).__name__, exc)
        self.metrics.errors.inc(tags={"index": index, "status": "warm_up"})

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

    def _failed(self, index: str, exc: BaseException) -> ErrorPayload:
        if not isinstance(exc, Exception):
            raise exc  # KeyboardInterrupt, SystemExit
        payload = error_of(exc)
        if payload is None:
            log.error("query on %s failed", index, exc_info=exc)
            payload = error_payload(500, f"internal error: {type(exc).__name__}: {exc}"[:1000])
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
        history: list[dict[str, str]] | None = None,
    ) -> AnswerPayload | ErrorPayload:
        """One whole answer as a JSON-ready dict, or ``{"error": {"status", "message"}}`` for known failures."""
        try:
            live = live_of(self.lives, index)
        except IndexNotFoundError as exc:
            return error_payload(404, str(exc))
        scope = RequestScope(deadline)
        started = time.perf_counter()

        def pinned_answer() -> tuple[Any, Any]:
            # Pinned in the worker thread, for as long as it reads (a deadline may leave it running a moment).
            with live.pin() as pinned:
                scope.generation = pinned.generation
                extra = {"history": history} if history else {}
                return pinned, pinned.value.pipeline.answer(question, mode=mode, topic=topic, **extra)

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
        history: list[dict[str, str]] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """``{"type": "delta", "text"}`` events, then one ``{"type": "final", **payload}`` (or ``"error"``)."""
        try:
            live = live_of(self.lives, index)
        except IndexNotFoundError as exc:
            yield {"type": "error", **error_payload(404, str(exc))}
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
                extra = {"history": history} if history else {}
                events = pinned.value.pipeline.answer_stream(question, mode=mode, topic=topic, **extra)
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
    ) -> AnswerPayload | ErrorPayload:
        """A chunk, the graph around entities, or the index's statistics (:mod:`serve.index_views`) as a JSON-ready
        dict, or ``{"error": {"status", "message"}}``: 404 for what the index does not hold."""
        try:
            live = live_of(self.lives, index)
        except IndexNotFoundError as exc:
            return error_payload(404, str(exc))

        def pinned_view() -> dict[str, Any]:
            with live.pin() as pinned:  # a switch meanwhile cannot close what the view reads
                return self.views.run(kind, index, params, pinned.index)

        try:
            return await run_in_thread(self.pool, RequestScope(deadline), pinned_view)
        except asyncio.CancelledError:
            raise
        except NotInIndex as exc:
            return error_payload(404, str(exc))
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
            "warm_up_s": self.warm_up_s,
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
