"""Adapters that make Serve ``DeploymentHandle``s satisfy the library's seams — the LLM and Embedder protocols and
the query flow's parts (:mod:`hxd2_ray.retrieval.parts`: Planner, PlanExecutor, Verifier, GraphRetriever) — so the
very flow the CLI builds runs inside a Retriever replica unchanged: ``build_pipeline(mode, index, HandleLLM(...),
HandleEmbedder(...), cfg, parts=FlowParts(planner=HandlePlanner(...), ...))``.

Threads, not async adapters (the design choice)
-----------------------------------------------
The pipeline is synchronous library code (``llm.complete([...])``, ``embedder.embed([...])``, Kùzu and Faiss
calls) shared with the CLI and the batch evaluation. Serve replicas are asyncio; a sync call inside the event loop
would stall every other request of the replica, and ``DeploymentResponse.result()`` refuses to run there. So a
replica runs each pipeline call in a worker thread (:func:`run_in_thread`, a bounded pool sized like the replica's
``max_ongoing_requests``), and the adapters block *that thread* on ``handle.method.remote(...).result()``. Serve's
router runs in its own loop, so handle calls from a plain thread are supported and the replica's loop stays free.

The alternative, an async pipeline, would mean a second copy of the query engine (or ``async`` all the way down
through the index, graph and vector code) for no gain here: every blocking wait is a remote call or a C++
search that releases the GIL, so threads overlap as well as coroutines would, and the LLM's continuous batching
still sees every concurrent request because each thread's call is its own Serve request.

Deadlines and cancellation cross into the thread through a :class:`RequestScope` in a ``ContextVar``
(``run_in_thread`` copies the context): every handle call waits at most the time left, registers itself so that
``scope.cancel()`` (client gone, deadline passed) cancels it at once, and a streaming call closed early cancels
its downstream generator, which aborts the generation in the LLM engine.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
import threading
import time
from typing import Any, Callable, Iterator, Sequence, TypeVar

import numpy as np

from hxd2_ray.config import (
    EmbeddingConfig,
    LLMConfig,
    OpenAILLMConfig,
    VllmLLMConfig,
    embedding_model_id,
    llm_model_id,
)
from hxd2_ray.errors import HxdError
from hxd2_ray.llm.base import LLMRequest, LLMResponse
from serve.replica_failures import count_replica_failure, is_replica_loss

log = logging.getLogger("hxd2.serve")

T = TypeVar("T")

TRANSPORTS = ("grpc", "actor")


def over(handle: Any, transport: str) -> Any:
    """``handle`` set to call its deployment over ``transport`` (``args.transport``). grpc: Serve's by-value
    handles, which call the chosen replica's inter-deployment gRPC server with the pickled arguments; actor: Ray
    actor calls, whose results live in the object store. Nothing here passes a response on as an ObjectRef (the
    one thing only actor calls can do), and a hop over gRPC costs about half the CPU (``bench/serve_load.py``)."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
    if handle is None or transport == "actor":
        return handle
    return handle.options(_by_reference=False)


class DeadlineExceeded(HxdError, TimeoutError):
    """The request's deadline passed before the pipeline finished."""


class RequestCancelled(HxdError):
    """The request was cancelled (the client went away, or its deadline passed) while a stage was running."""


class RequestScope:
    """Deadline + cancellation of one request, shared by the async side and the pipeline thread."""

    def __init__(self, deadline: float | None = None, generation: str | None = None):
        self.deadline = deadline  # time.time() seconds (wall clock: comparable across processes)
        # The index generation the request reads everywhere (set by the Retriever when it pins one; the part
        # deployments answer from the same one, see hxd2_ray.retrieval.live_index).
        self.generation = generation
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._inflight: set[Any] = set()

    @classmethod
    def after(cls, seconds: float | None) -> "RequestScope":
        return cls(None if seconds is None else time.time() + seconds)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def remaining(self) -> float | None:
        """Seconds left (None: no deadline). Raises when cancelled or past the deadline."""
        if self._cancelled.is_set():
            raise RequestCancelled("the request was cancelled")
        if self.deadline is None:
            return None
        left = self.deadline - time.time()
        if left <= 0:
            raise DeadlineExceeded("the request deadline passed")
        return left

    def track(self, response: Any) -> None:
        with self._lock:
            self._inflight.add(response)
        if self._cancelled.is_set():
            cancel_quietly(response)

    def untrack(self, response: Any) -> None:
        with self._lock:
            self._inflight.discard(response)

    def cancel(self) -> None:
        """Cancel every handle call in flight for this request (safe from any thread; idempotent)."""
        self._cancelled.set()
        with self._lock:
            inflight, self._inflight = list(self._inflight), set()
        for response in inflight:
            cancel_quietly(response)


def cancel_quietly(response: Any) -> None:
    """Cancel a handle call; one that already finished or failed may re-raise its error from ``cancel()``, and
    that error was (or is being) answered already."""
    try:
        response.cancel()
    except Exception as exc:  # noqa: BLE001 - already finished, or the replica is gone: the call's own answer says so
        log.warning("cancelling a handle call raised %s: %s (the call answers for it)", type(exc).__name__, exc)


_scope: contextvars.ContextVar[RequestScope | None] = contextvars.ContextVar("hxd2_request_scope", default=None)


def current_scope() -> RequestScope | None:
    return _scope.get()


async def run_in_thread(
    pool: concurrent.futures.Executor, scope: RequestScope, fn: Callable[..., T], *args: Any, **kwargs: Any
) -> T:
    """``fn(*args)`` in ``pool`` with ``scope`` visible to the adapters; waits at most the scope's time left.

    When the waiting coroutine is cancelled or the deadline passes, the scope is cancelled, which makes the
    thread's current handle call fail fast, so the thread is not kept busy for a request nobody waits for.
    """
    ctx = contextvars.copy_context()
    ctx.run(_scope.set, scope)
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(pool, functools.partial(ctx.run, _unless_given_up, scope, fn, *args, **kwargs))
    timeout = None if scope.deadline is None else max(0.0, scope.deadline - time.time())
    try:
        return await asyncio.wait_for(asyncio.shield(future), timeout)
    except asyncio.TimeoutError:
        cancel_soon(scope)
        future.cancel()  # still waiting for a thread: it never starts
        raise DeadlineExceeded("the request deadline passed") from None
    except asyncio.CancelledError:
        cancel_soon(scope)
        future.cancel()
        raise


def scoped(scope: RequestScope, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args)`` with ``scope`` visible to the adapters, in this thread (a pool thread's work that no coroutine
    waits for, such as a replica's warm-up). The thread's previous scope is restored after: a pool thread's next
    work must not read this request's deadline or generation."""
    token = _scope.set(scope)
    try:
        return _unless_given_up(scope, fn, *args, **kwargs)
    finally:
        _scope.reset(token)


def _unless_given_up(scope: RequestScope, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args)``, unless the request was cancelled or ran out of time while it waited for a thread (a pool
    queues what its threads cannot take yet): work nobody waits for is not started."""
    scope.remaining()  # raises RequestCancelled or DeadlineExceeded
    return fn(*args, **kwargs)


def cancel_soon(scope: RequestScope) -> None:
    """``scope.cancel()`` off the event loop (cancelling a handle call may briefly block on its router)."""
    threading.Thread(target=scope.cancel, name="hxd2-cancel", daemon=True).start()


def _wait(response: Any, deployment: str) -> Any:
    """``response.result()`` bounded by the current scope, registered for cancellation; a replica of
    ``deployment`` lost under the call is counted (:mod:`serve.replica_failures`)."""
    try:
        return _bounded(response)
    except BaseException as exc:
        if is_replica_loss(exc):
            count_replica_failure(deployment)
        raise


def _bounded(response: Any) -> Any:
    scope = current_scope()
    if scope is None:
        return response.result()
    scope.track(response)
    try:
        timeout = scope.remaining()
        try:
            return response.result(timeout_s=timeout)
        except TimeoutError:
            if scope.deadline is not None and time.time() >= scope.deadline:
                raise DeadlineExceeded("the request deadline passed while waiting on a stage") from None
            raise
        except BaseException:
            if scope.cancelled:
                raise RequestCancelled("the request was cancelled") from None
            raise
    finally:
        scope.untrack(response)


class HandleLLM:
    """LLMClient over the LLM deployment: ``complete`` and ``stream`` are remote, ``count_tokens`` is local.

    Token counting runs here with the serving model's tokenizer (no engine: ``build_token_counter``), because the
    pipeline counts every context row while budgeting and a remote call per count would dominate its latency.
    """

    supports_json_schema = True
    thread_safe = True  # every call is its own Serve request; the engine batches them

    def __init__(self, handle: Any, cfg: LLMConfig, count_tokens: Callable[[str], int] | None = None):
        self._handle = handle
        self._stream_handle = handle.options(stream=True)
        self.model_id = llm_model_id(cfg)
        # Budgets the context like the in-process engine would.
        self.max_model_len: int | None = (
            cfg.max_model_len if isinstance(cfg, (VllmLLMConfig, OpenAILLMConfig)) else None
        )
        if count_tokens is None:
            from hxd2_ray.llm.tokens import build_token_counter

            count_tokens = build_token_counter(cfg)
        self._count = count_tokens

    def count_tokens(self, text: str) -> int:
        return self._count(text)

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        if not requests:
            return []
        return _wait(self._handle.complete.remote(list(requests)), "LLM")

    def stream(self, request: LLMRequest) -> Iterator[str]:
        """Text deltas from the LLM deployment. Closing this generator early cancels the remote stream, and the
        deployment aborts the generation in its engine."""
        scope = current_scope()
        if scope is not None:
            scope.remaining()  # fail before starting when already cancelled or late
        gen = self._stream_handle.stream.remote(request)
        if scope is not None:
            scope.track(gen)
        finished = False
        try:
            for delta in gen:
                yield delta
            finished = True
        except BaseException as exc:
            if scope is not None and scope.cancelled:
                raise RequestCancelled("the request was cancelled while streaming") from None
            if is_replica_loss(exc):
                count_replica_failure("LLM")
            raise
        finally:
            if scope is not None:
                scope.untrack(gen)
            if not finished:
                cancel_quietly(gen)


class HandleEmbedder:
    """Embedder over the (batched) embedder deployment. ``model_id``/``dim`` come from the config, so building
    the pipeline (which checks them against the index manifest) needs no remote call."""

    def __init__(self, handle: Any, cfg: EmbeddingConfig):
        self._handle = handle
        self.model_id = embedding_model_id(cfg)
        self.dim = cfg.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = _wait(self._handle.embed.remote(list(texts)), "Embedder")
        return np.ascontiguousarray(out, dtype=np.float32)


def _deadline() -> float | None:
    scope = current_scope()
    return None if scope is None else scope.deadline


def _generation() -> str | None:
    scope = current_scope()
    return None if scope is None else scope.generation


class HandlePlanner:
    """:class:`~hxd2_ray.retrieval.parts.Planner` over the Planner deployment (returns its ``PlanResult``)."""

    def __init__(self, handle: Any):
        self._handle = handle

    def plan(self, question: str, *, language: str | None = None, relations: Sequence[str] = ()) -> Any:
        return _wait(self._handle.plan.remote(question, language, list(relations), _deadline()), "Planner")


class HandlePlanExecutor:
    """:class:`~hxd2_ray.retrieval.parts.PlanExecutor` over the PlanExecutor deployment, for one index."""

    def __init__(self, handle: Any, index: str):
        self._handle = handle
        self.index = index

    def execute(self, plan: Any, question: str = "") -> Any:
        return _wait(
            self._handle.execute.remote(self.index, plan, question, _deadline(), _generation()), "PlanExecutor"
        )


class HandleVerifier:
    """:class:`~hxd2_ray.retrieval.parts.Verifier` over the Verifier deployment, in one check mode."""

    def __init__(self, handle: Any, mode: str):
        self._handle = handle
        self.mode = mode

    def verify(self, question: str, evidence: Any, answer: str | None = None, *, language: str | None = None) -> Any:
        return _wait(
            self._handle.verify.remote(question, evidence, answer, language, self.mode, _deadline()), "Verifier"
        )


class HandleGraphRetriever:
    """:class:`~hxd2_ray.retrieval.parts.GraphRetriever` over the GraphWalker deployment, for one index: the walk
    runs there, bounded by the request's deadline; the result comes back as the retriever's own
    :class:`~hxd2_ray.graphflow.results.GraphFlowResult` (plain data: reading it loads no torch)."""

    def __init__(self, handle: Any, index: str):
        self._handle = handle
        self.index = index

    def retrieve(self, question: str, topic: str | None = None) -> Any:
        return _wait(
            self._handle.retrieve.remote(self.index, question, _deadline(), topic, _generation()), "GraphWalker"
        )
