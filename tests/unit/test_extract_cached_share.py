"""Issue 46: what the engine served from its prefix cache is counted, from each response (vLLM's
``num_cached_tokens``, an OpenAI server's ``prompt_tokens_details.cached_tokens``) up to the run ledger, the index
summary and the progress line; and requests carry stop strings to the engine and into the LLM cache key."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace
from typing import Sequence

import pytest

from hxd2_ray.config import OpenAILLMConfig
from hxd2_ray.llm.base import LLMRequest, LLMResponse
from hxd2_ray.llm.cache import request_key
from hxd2_ray.llm.metering import MeteredLLM
from hxd2_ray.llm.openai_backend import OpenAIAsyncEngine
from hxd2_ray.progress import CountingLLM
from hxd2_ray.stages.cost import UsageLedger, llm_payload
from jobs.index_format import _run_line
from jobs.progress import ProgressBoard, describe

MESSAGES = ({"role": "user", "content": "Who founded the Halden Institute?"},)


def test_stop_strings_reach_the_engine_and_the_cache_key():
    pytest.importorskip("vllm")
    from hxd2_ray.llm.vllm_setup import sampling_params

    req = LLMRequest(messages=MESSAGES, max_tokens=64, stop=("<|COMPLETE|>",))
    assert sampling_params(req, 10).stop == ["<|COMPLETE|>"]
    plain = LLMRequest(messages=MESSAGES, max_tokens=64)
    assert not sampling_params(plain, 10).stop
    assert request_key("m", "v1", plain) != request_key("m", "v1", req)


def test_the_in_process_engine_reports_vllms_prefix_cache_hits():
    from hxd2_ray.llm.vllm_engine import _to_response

    completion = SimpleNamespace(text="{}", token_ids=[1, 2, 3], finish_reason="length")
    out = SimpleNamespace(prompt_token_ids=list(range(100)), num_cached_tokens=96, outputs=[completion])
    response = _to_response(out)
    assert (response.prompt_tokens, response.cached_tokens, response.completion_tokens) == (100, 96, 3)
    out.num_cached_tokens = None  # prefix caching off
    assert _to_response(out).cached_tokens == 0


def test_the_async_engine_reports_vllms_prefix_cache_hits():
    import asyncio

    from hxd2_ray.llm.vllm_async import AsyncVllmEngine

    final = SimpleNamespace(
        prompt_token_ids=list(range(100)),
        num_cached_tokens=64,
        outputs=[SimpleNamespace(text="{}", token_ids=[1, 2], finish_reason="stop")],
    )

    async def generate(prompt, params, request_id):
        yield final

    engine = AsyncVllmEngine.__new__(AsyncVllmEngine)  # no real engine: only the reply's accounting is under test
    engine._prepare = lambda req, delta: ({"prompt_token_ids": list(range(100))}, None)
    engine._generate = generate
    response = asyncio.run(engine._complete_one(LLMRequest(messages=MESSAGES)))
    assert (response.prompt_tokens, response.cached_tokens, response.completion_tokens) == (100, 64, 2)


def test_a_request_without_stop_strings_keeps_its_cache_key():
    # The key as it was computed before requests had stop strings: replies stored then stay reachable.
    payload = {
        "model": "m",
        "prompt_version": "v1",
        "messages": [["user", MESSAGES[0]["content"]]],
        "max_tokens": 64,
        "temperature": 0.0,
        "json_schema": None,
        "choices": None,
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    expected = hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()
    assert request_key("m", "v1", LLMRequest(messages=MESSAGES, max_tokens=64)) == expected


def test_the_openai_backend_sends_stop_and_reads_the_servers_cached_tokens():
    engine = OpenAIAsyncEngine(OpenAILLMConfig())
    req = LLMRequest(messages=MESSAGES, max_tokens=64, stop=("<|COMPLETE|>",))
    assert engine._params(req)["stop"] == ["<|COMPLETE|>"]
    assert "stop" not in engine._params(LLMRequest(messages=MESSAGES))
    details = SimpleNamespace(cached_tokens=64)
    usage = SimpleNamespace(prompt_tokens=100, completion_tokens=5, prompt_tokens_details=details)
    choice = SimpleNamespace(message=SimpleNamespace(content="hi"), finish_reason="stop")
    reply = SimpleNamespace(choices=[choice], usage=usage)
    response, problem = engine._read(reply, req, schema_sent=False)
    assert problem == "" and response.cached_tokens == 64 and response.prompt_tokens == 100
    usage.prompt_tokens_details = None  # a server that does not report them
    assert engine._read(reply, req, schema_sent=False)[0].cached_tokens == 0


# ------------------------------------------------------------------------------------- cached share counted


class CachingFake:
    """Answers every request with 100 prompt tokens, ``cached`` of them from the prefix cache, and 10 generated."""

    model_id = "fake"
    supports_json_schema = False
    thread_safe = False
    max_model_len = None

    def __init__(self, cached: int):
        self.cached = cached

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        return [LLMResponse("x", prompt_tokens=100, completion_tokens=10, cached_tokens=self.cached) for _ in requests]

    def count_tokens(self, text: str) -> int:
        return len(text.split())


class Counter:
    def __init__(self) -> None:
        self.counts: dict[str, float] = {}

    def add(self, **counts: float) -> None:
        for k, v in counts.items():
            self.counts[k] = self.counts.get(k, 0) + v


def test_cached_tokens_reach_the_ledger_the_summary_and_the_progress_line():
    counter = Counter()
    metered = MeteredLLM(CountingLLM(CachingFake(cached=80), counter))
    reqs = [LLMRequest(messages=({"role": "user", "content": "q"},), tag=t) for t in ("extract", "extract", "glean")]
    metered.complete(reqs)
    assert counter.counts["cached_tokens"] == 240 and counter.counts["prompt_tokens"] == 300
    by_tag, seconds = metered.take()
    ledger = UsageLedger()
    ledger.charge(llm_payload(by_tag, seconds, {}, "fake", 0))
    totals = ledger.totals()
    assert totals["prefix_cached_tokens"] == 240 and totals["prompt_tokens"] == 300
    assert totals["stages"]["extraction"]["prefix_cached_tokens"] == 160
    line = _run_line({"run": totals})
    assert "prompt tokens 300 (240 prefix-cached, 80.0%)" in line
    board = ProgressBoard(clock=lambda: 10.0)
    board.begin("extract", total=3, unit="chunks")
    board.add("extract", **counter.counts)
    assert "80% of prompt tokens prefix-cached" in describe(board.stages["extract"], 12.0)


def test_no_cached_share_shown_where_the_backend_reports_none():
    totals = UsageLedger().totals()
    totals.update(prompt_tokens=300)
    assert "prefix-cached" not in _run_line({"run": totals})
