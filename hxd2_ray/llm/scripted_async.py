"""The scripted fake with the async engine's surface (:class:`~hxd2_ray.llm.base.AsyncLLMEngine`): what the LLM
deployment runs with ``llm.backend: scripted`` (Serve tests, load tests, the overhead benchmark).

Its replies are :class:`~hxd2_ray.llm.scripted.ScriptedLLM`'s built-in ones, so a served answer equals the CLI's
and the evaluation job's over the same index. Latency can be injected (:class:`ScriptedLatency`) to simulate an
LLM's time: per call, per streamed word, and extra for requests carrying a marker.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator, Sequence

from hxd2_ray.config import ScriptedLLMConfig
from hxd2_ray.errors import BackendError
from hxd2_ray.llm.base import LLMRequest, LLMResponse
from hxd2_ray.llm.scripted import ScriptedLLM


@dataclass(frozen=True)
class ScriptedLatency:
    delay_s: float = 0.0  # before every completion, and before a stream's first word
    token_delay_s: float = 0.0  # before every streamed word
    slow_marker: str | None = None  # requests whose text contains it are slower ...
    slow_delay_s: float = 0.5  # ... by this much per call and per streamed word


class ScriptedAsyncEngine:
    supports_json_schema = True

    def __init__(self, cfg: ScriptedLLMConfig, latency: ScriptedLatency = ScriptedLatency()):
        self.latency = latency
        self.llm = ScriptedLLM.from_config(cfg, record=False)
        self.model_id = cfg.model_id
        self.max_model_len: int | None = None
        self.stats = {"started": 0, "finished": 0, "aborted": 0, "failed": 0, "streaming": 0}

    def _delay(self, req: LLMRequest, per_token: bool) -> float:
        lat = self.latency
        base = lat.token_delay_s if per_token else lat.delay_s
        if lat.slow_marker and any(lat.slow_marker in m["content"] for m in req.messages):
            base += lat.slow_delay_s
        return base

    async def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        self.stats["started"] += len(requests)
        delay = max((self._delay(r, False) for r in requests), default=0.0)
        if delay:
            await asyncio.sleep(delay)
        out = self.llm.complete(requests)
        self.stats["finished"] += len(requests)
        self.stats["failed"] += sum(1 for r in out if r.error)
        return out

    async def stream(self, request: LLMRequest) -> AsyncIterator[str]:
        self.stats["started"] += 1
        self.stats["streaming"] += 1
        finished = False
        try:
            first = self._delay(request, False)
            if first:
                await asyncio.sleep(first)
            response = self.llm.complete([request])[0]
            if response.error:
                self.stats["failed"] += 1
                raise BackendError(f"the LLM failed: {response.error}")
            words = response.text.split(" ")
            per_token = self._delay(request, True)
            for i, word in enumerate(words):
                if per_token:
                    await asyncio.sleep(per_token)
                yield word if i == 0 else " " + word
            finished = True
        finally:
            self.stats["streaming"] -= 1
            if finished:
                self.stats["finished"] += 1
            else:
                self.stats["aborted"] += 1

    def count_tokens(self, text: str) -> int:
        return self.llm.count_tokens(text)

    def snapshot(self) -> dict[str, Any]:
        return dict(self.stats, backend="scripted", model_id=self.model_id, unfinished=self.stats["streaming"])

    async def check_health(self) -> None:
        return None

    def close(self) -> None:
        return None
