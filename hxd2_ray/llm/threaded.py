"""A synchronous, thread-safe :class:`~hxd2_ray.llm.base.LLMClient` over vLLM's async engine.

The offline :class:`~hxd2_ray.llm.vllm_engine.VllmEngineLLM` answers one blocking batch at a time, so a caller
that answers questions one by one (the evaluation job: keywords, plan, verifier, answer, each depending on the
last) keeps the engine at one sequence. Here many threads call ``complete`` at once and vLLM's scheduler
batches whatever is in flight: N questions in N threads share every decoding step.

One event loop runs in a daemon thread and owns the :class:`~hxd2_ray.llm.vllm_async.AsyncVllmEngine` (built
inside that loop, so the engine's output handler lives there). Calls from other threads are handed to it with
``run_coroutine_threadsafe``. ``thread_safe = True`` tells wrappers (the multi-stage pipeline's
``SerializedLLM``) that they need not hold a lock around calls.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, Coroutine, Iterator, Sequence, TypeVar

from hxd2_ray.config import VllmLLMConfig
from hxd2_ray.llm.base import LLMRequest, LLMResponse

T = TypeVar("T")
_END = object()


class ThreadedVllmLLM:
    supports_json_schema = True
    thread_safe = True

    def __init__(self, cfg: VllmLLMConfig, *, compact_json: bool = True) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="hxd2-vllm-loop", daemon=True)
        self._thread.start()
        try:
            self.engine = self._call(_build_engine(cfg, compact_json))
        except BaseException:
            self._stop_loop()
            raise
        self.model_id = self.engine.model_id
        self.max_model_len = self.engine.max_model_len

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        if not requests:
            return []
        return self._call(self.engine.complete(list(requests)))

    def stream(self, request: LLMRequest) -> Iterator[str]:
        """Text deltas; closing the iterator early aborts the request in the engine."""
        deltas: queue.Queue[Any] = queue.Queue()

        async def pump() -> None:
            try:
                async for delta in self.engine.stream(request):
                    deltas.put(delta)
            except BaseException as exc:  # noqa: BLE001 - handed to the consuming thread
                deltas.put(exc)
            finally:
                deltas.put(_END)

        future = asyncio.run_coroutine_threadsafe(pump(), self._loop)
        try:
            while (item := deltas.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if not future.done():
                future.cancel()  # the engine's generator aborts the request on cancellation

    def count_tokens(self, text: str) -> int:
        return self.engine.count_tokens(text)

    def close(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.close()
            self.engine = None
        self._stop_loop()

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)

    def __enter__(self) -> "ThreadedVllmLLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _build_engine(cfg: VllmLLMConfig, compact_json: bool) -> Any:
    from hxd2_ray.llm.vllm_async import AsyncVllmEngine

    return AsyncVllmEngine(cfg, compact_json=compact_json)
