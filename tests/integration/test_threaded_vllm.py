"""ThreadedVllmLLM with the real small model: calls from many threads are in the engine together, streams
yield text, and a stream closed early is aborted in the engine."""

from __future__ import annotations

import threading
import time

import pytest

from hxd2_ray.config import VllmLLMConfig
from hxd2_ray.llm.base import LLMRequest

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

CITIES = ("Paris", "Rome", "Tokyo")


@pytest.fixture(scope="module")
def llm():
    from hxd2_ray.llm.threaded import ThreadedVllmLLM

    cfg = VllmLLMConfig(
        backend="vllm",
        model="builtin:smollm2-135m-instruct",
        max_model_len=2048,
        enforce_eager=True,
        cpu_kv_cache_gb=1,
        max_num_seqs=16,
        dtype="float32",  # the shipped CPU config's: bf16 is emulated on CPUs without bf16 units
    )
    with ThreadedVllmLLM(cfg) as client:
        yield client


def _ask(n: int, max_tokens: int = 16) -> LLMRequest:
    return LLMRequest(
        messages=({"role": "user", "content": f"Name a city in country number {n}."},),
        max_tokens=max_tokens,
        choices=CITIES,
        tag=f"q{n}",
    )


def test_threads_share_the_engine(llm):
    assert llm.thread_safe and llm.supports_json_schema and llm.max_model_len == 2048
    results: dict[int, object] = {}
    peak = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, llm._call(_unfinished(llm.engine)))
            time.sleep(0.01)

    def call(n: int) -> None:
        # long enough (dozens of decoding steps) that the six requests overlap however threads are scheduled
        results[n] = llm.complete(
            [LLMRequest(messages=({"role": "user", "content": f"Tell story number {n}."},), max_tokens=48, tag=f"s{n}")]
        )[0]

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=call, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    assert sorted(results) == list(range(6))
    for resp in results.values():
        assert not resp.error and resp.completion_tokens > 0 and resp.text.strip()
    assert peak > 1  # several threads' requests were scheduled together
    constrained = llm.complete([_ask(n) for n in range(3)])
    assert [r.text in CITIES for r in constrained] == [True] * 3


async def _unfinished(engine) -> int:
    return engine.num_unfinished()


def test_stream_and_early_close_aborts(llm):
    req = LLMRequest(messages=({"role": "user", "content": "Count from one to fifty in words."},), max_tokens=200)
    text = "".join(llm.stream(req))
    assert text.strip()
    aborted = llm.engine.stats.aborted
    stream = llm.stream(req)
    assert next(stream)
    stream.close()
    deadline = time.monotonic() + 30
    while llm.engine.stats.aborted == aborted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert llm.engine.stats.aborted == aborted + 1
    assert llm._call(_unfinished(llm.engine)) == 0
    # the engine still answers afterwards
    assert llm.complete([_ask(1)])[0].completion_tokens > 0
