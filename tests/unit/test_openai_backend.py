"""``llm.backend: openai`` against a fault-injecting stub server (tests/openai_stub.py) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
import threading

import pytest

from hxd2_ray.config import OpenAILLMConfig, load_config
from hxd2_ray.errors import BackendError, ConfigError, HxdError
from hxd2_ray.extraction.extractor import Extractor
from hxd2_ray.extraction.prompts import load_prompts
from hxd2_ray.llm.base import LLMRequest
from hxd2_ray.llm.cache import request_key
from hxd2_ray.llm.metering import MeteredLLM
from hxd2_ray.llm.openai_backend import OpenAILLM, check_server
from hxd2_ray.types import Chunk
from hxd2_ray.wiring import build_llm, check_llm_server
from tests.openai_stub import StubOpenAIServer

SECRET = "sk-test-DISTINCTIVE-9f3a7c"
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def _cfg(server: StubOpenAIServer, **kw: object) -> OpenAILLMConfig:
    base = {
        "base_url": server.base_url,
        "model": server.model,
        "timeout_s": 1.0,
        "max_retries": 2,
        "api_key_env": "HXD2_TEST_OPENAI_KEY",
    }
    return OpenAILLMConfig(**{**base, **kw})  # type: ignore[arg-type]


def _ask(text: str = "hi", **kw: object) -> LLMRequest:
    return LLMRequest(messages=({"role": "user", "content": text},), max_tokens=16, **kw)  # type: ignore[arg-type]


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HXD2_TEST_OPENAI_KEY", SECRET)
    return SECRET


def test_config_is_a_member_of_the_llm_union_and_lists_valid_backends() -> None:
    cfg = load_config(None, ["llm.backend=openai", "llm.model=m", "llm.base_url=http://h:1/v1"])
    assert isinstance(cfg.llm, OpenAILLMConfig) and cfg.llm.api_key_env == "OPENAI_API_KEY"
    with pytest.raises(ConfigError, match="openai"):
        load_config(None, ["llm.backend=nope"])
    for name, field in OpenAILLMConfig.model_fields.items():
        assert name == "backend" or field.description, f"llm.{name} has no description"


def test_completion_usage_key_and_schema(secret: str) -> None:
    with StubOpenAIServer() as server, OpenAILLM(_cfg(server)) as llm:
        plain, structured = llm.complete([_ask("hello"), _ask("x", json_schema=SCHEMA)])
    assert plain.text == "echo: hello" and not plain.error
    assert (plain.prompt_tokens, plain.completion_tokens) == (11, 7)  # from the reply's usage
    assert json.loads(structured.text) is not None
    bodies = {b["messages"][0]["content"]: b for b in (r["body"] for r in server.chat_requests)}
    assert all(b["model"] == "stub-model" for b in bodies.values())
    assert "response_format" not in bodies["hello"]
    assert bodies["x"]["response_format"]["json_schema"]["schema"] == SCHEMA
    # The key is read from the variable and sent as a bearer token, and nothing else of ours holds it.
    assert all(r["headers"].get("authorization") == f"Bearer {secret}" for r in server.chat_requests)
    assert SECRET not in repr(vars(llm.engine)) and SECRET not in json.dumps(llm.engine.snapshot())


def test_no_key_variable_sends_a_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HXD2_TEST_OPENAI_KEY", raising=False)
    with StubOpenAIServer() as server, OpenAILLM(_cfg(server)) as llm:
        assert not llm.complete([_ask()])[0].error


@pytest.mark.parametrize("fault", ["429", "500", "timeout", "truncated", "off_schema"])
def test_a_fault_is_retried_within_bounds(fault: str, secret: str) -> None:
    with StubOpenAIServer(faults=[fault, fault]) as server, OpenAILLM(_cfg(server, max_retries=2)) as llm:
        (resp,) = llm.complete([_ask(json_schema=SCHEMA)])
    assert not resp.error, resp.error
    assert json.loads(resp.text) == {"entities": [], "relations": [], "content_keywords": []}
    assert len(server.chat_requests) == 3  # two faults, then the answer


@pytest.mark.parametrize("fault", ["429", "500", "timeout", "truncated", "off_schema"])
def test_a_persistent_fault_fails_the_request_not_the_batch(
    fault: str, secret: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with StubOpenAIServer(persistent={"doomed": fault}) as server, OpenAILLM(_cfg(server, max_retries=1)) as llm:
        failed, ok = llm.complete([_ask("doomed", json_schema=SCHEMA), _ask("b")])
    assert failed.error and failed.finish_reason == "error" and not ok.error
    assert len([r for r in server.chat_requests if "doomed" in json.dumps(r["body"])]) == 2  # 1 + max_retries
    if fault != "off_schema":
        assert server.base_url in failed.error
    assert SECRET not in failed.error and SECRET not in caplog.text


def test_a_failed_chunk_is_counted_by_the_extractor(secret: str) -> None:
    """The extractor's own retries and failed-chunk accounting apply as with the in-process engine: a chunk whose
    every attempt fails is returned with its error, the other chunk is extracted."""
    cfg = load_config(None, ["extraction.max_gleaning=0"])
    chunks = [
        Chunk(id=f"c{i}", doc_id="d", order=i, start=0, text=t)
        for i, t in enumerate(["Ada Lovelace wrote notes.", "Alan Turing broke codes."])
    ]
    with StubOpenAIServer(persistent={"Ada Lovelace": "500"}) as server:
        llm = OpenAILLM(_cfg(server, max_retries=1))
        try:
            first, second = Extractor(llm, cfg.extraction, load_prompts(), max_retries=1).extract(chunks)
        finally:
            llm.close()
    failed = [e for e in (first, second) if e.error]
    assert [e.chunk_id for e in failed] == ["c0"] and "HTTP 500" in failed[0].error and SECRET not in failed[0].error
    assert first.llm_calls == 2  # the extractor's one retry of the failed request


def test_a_server_without_structured_output_falls_back_to_the_parser(secret: str) -> None:
    with StubOpenAIServer(reject_response_format=True) as server, OpenAILLM(_cfg(server)) as llm:
        first, second = (llm.complete([_ask(json_schema=SCHEMA)])[0], llm.complete([_ask(json_schema=SCHEMA)])[0])
    assert not first.error and not second.error
    sent = [bool(r["body"].get("response_format")) for r in server.chat_requests]
    assert sent == [True, False, False]  # rejected once, then never sent again


def test_requests_of_one_batch_are_in_flight_together_up_to_the_bound(secret: str) -> None:
    with StubOpenAIServer(delay_s=0.3) as server, OpenAILLM(_cfg(server, max_concurrency=4)) as llm:
        out = llm.complete([_ask(str(i)) for i in range(10)])
    assert [r.text for r in out] == [f"echo: {i}" for i in range(10)]  # in order
    assert server.peak_in_flight == 4 and llm.stats.max_in_flight == 4


def test_calls_from_many_threads_share_the_client(secret: str) -> None:
    with StubOpenAIServer(delay_s=0.1) as server, OpenAILLM(_cfg(server, max_concurrency=8)) as llm:
        results: list[str] = []
        threads = [
            threading.Thread(target=lambda i=i: results.append(llm.complete([_ask(str(i))])[0].text)) for i in range(6)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(results) == sorted(f"echo: {i}" for i in range(6)) and server.peak_in_flight > 1


def test_streaming(secret: str) -> None:
    with StubOpenAIServer() as server, OpenAILLM(_cfg(server)) as llm:
        deltas = list(llm.stream(_ask("one two three")))
        assert len(deltas) > 1 and "".join(deltas).split() == ["echo:", "one", "two", "three"]
        assert server.chat_requests[-1]["body"]["stream"] is True


def test_streaming_failure_raises_a_backend_error_without_the_key(secret: str) -> None:
    with StubOpenAIServer(faults=["500"] * 3) as server, OpenAILLM(_cfg(server, max_retries=1)) as llm:
        with pytest.raises(BackendError) as err:
            list(llm.stream(_ask()))
    assert SECRET not in str(err.value) and server.base_url in str(err.value)


def test_metering_counts_usage_from_the_reply(secret: str) -> None:
    with StubOpenAIServer() as server, OpenAILLM(_cfg(server)) as llm:
        metered = MeteredLLM(llm)
        metered.complete([_ask(tag="extract"), _ask(tag="extract")])
        usage, _ = metered.take()
    assert (usage["extract"].calls, usage["extract"].prompt_tokens, usage["extract"].completion_tokens) == (2, 22, 14)


def test_cache_key_includes_the_served_model(secret: str) -> None:
    with StubOpenAIServer() as server:
        a, b = OpenAILLM(_cfg(server, model="m-a")), OpenAILLM(_cfg(server, model="m-b"))
        try:
            assert request_key(a.model_id, "v", _ask()) != request_key(b.model_id, "v", _ask())
        finally:
            a.close()
            b.close()


def test_token_estimate_without_a_tokenizer(secret: str) -> None:
    with StubOpenAIServer() as server, OpenAILLM(_cfg(server)) as llm:
        assert llm.count_tokens("") == 0 and llm.count_tokens("abcdefghi") == 3 and llm.max_model_len is None


def test_build_llm_wires_the_openai_backend(secret: str) -> None:
    with StubOpenAIServer() as server:
        llm = build_llm(_cfg(server))
        try:
            assert isinstance(llm, OpenAILLM) and llm.thread_safe
        finally:
            llm.close()  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------- preflight


def test_preflight_passes_for_a_live_server_serving_the_model(secret: str) -> None:
    with StubOpenAIServer() as server:
        check_llm_server(_cfg(server))


def test_preflight_names_the_url_of_a_server_that_is_down(secret: str) -> None:
    with StubOpenAIServer() as server:
        url = server.base_url
        cfg = _cfg(server)
    with pytest.raises(HxdError) as err:
        check_server(cfg)  # the stub has stopped: connection refused
    message = str(err.value)
    assert url in message and "not reachable" in message and "\n" not in message and SECRET not in message


def test_preflight_says_which_models_the_server_has(secret: str) -> None:
    with StubOpenAIServer() as server:
        with pytest.raises(HxdError, match="does not serve model 'other'.*stub-model"):
            check_server(_cfg(server, model="other"))


def test_the_async_engine_serve_awaits(secret: str) -> None:
    """The LLM deployment's surface: complete, stream, health and stats on the replica's own event loop."""
    from hxd2_ray.llm.openai_backend import OpenAIAsyncEngine

    async def use(engine: OpenAIAsyncEngine) -> tuple[str, str]:
        await engine.check_health()
        (resp,) = await engine.complete([_ask("a")])
        deltas = [d async for d in engine.stream(_ask("b c"))]
        await engine.aclose()
        return resp.text, "".join(deltas)

    with StubOpenAIServer() as server:
        engine = OpenAIAsyncEngine(_cfg(server, max_model_len=4096))
        text, streamed = asyncio.run(use(engine))
    assert text == "echo: a" and streamed.split() == ["echo:", "b", "c"]
    stats = engine.snapshot()
    assert stats["backend"] == "openai" and stats["requests"] == 2 and stats["max_model_len"] == 4096


def test_serve_handles_budget_with_the_configured_context() -> None:
    from serve.handles import HandleLLM

    class _Handle:
        def options(self, **_: object) -> "_Handle":
            return self

    handle = HandleLLM(_Handle(), OpenAILLMConfig(model="m", max_model_len=8192))
    assert handle.max_model_len == 8192 and handle.model_id == "m" and handle.count_tokens("abcdef") == 2
