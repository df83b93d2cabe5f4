"""Auth, body limits, edge validation and the HTTP API's error and streaming shapes, without Ray: the ingress ASGI app
(``serve.api.make_api``) over a fake retriever backend, driven in-process through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, AsyncIterator

import httpx
import pytest

from serve.api import ApiError, ApiSettings, make_api
from serve.auth import ApiKeys, AuthConfigError, GuardMiddleware, bearer_token, load_api_keys
from serve.schemas import ChatCompletionRequest, ServeAppArgs

KEY = "sk-unit-Zq8w1"
OTHER = "sk-unit-other"


class FakeBackend:
    """Answers like the Retriever deployment; records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, bool]] = []
        self.modes: list[str | None] = []
        self.topics: list[str | None] = []
        self.fail: ApiError | None = None

    async def answer(
        self, index: str, question: str, trace: bool, deadline: float, mode: str | None = None, topic: str | None = None
    ) -> dict[str, Any]:
        self.calls.append((index, question, trace))
        self.modes.append(mode)
        self.topics.append(topic)
        if self.fail is not None:
            raise self.fail
        return {
            "question": question,
            "answer": f"about {question}",
            "path": "dual_level",
            "mode": mode or "auto",
            "fallback_reason": "plan failed: no plan" if mode in (None, "auto") else None,
            "references": [
                {"doc_id": "d1", "source_id": "a.md", "title": "A", "source_path": "/a.md", "chunk_ids": ["c1"]}
            ],
            "notices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "finish_reason": "stop"},
            "timings_ms": {"total": 1.0},
            **({"trace": {"keywords": {}}} if trace else {}),
        }

    async def answer_stream(
        self, index: str, question: str, trace: bool, deadline: float, mode: str | None = None, topic: str | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        self.calls.append((index, question, trace))
        self.modes.append(mode)
        self.topics.append(topic)
        if self.fail is not None:
            raise self.fail
        for word in ("about", " ", "it"):
            yield {"type": "delta", "text": word}
        yield {
            "type": "final",
            "answer": "about it",
            "path": "dual_level",
            "references": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "finish_reason": "stop"},
        }

    async def health(self) -> dict[str, Any]:
        return {"served": len(self.calls)}


SETTINGS = ApiSettings(indexes=("tiny", "big"), default_index="tiny", max_body_bytes=2048, max_question_chars=500)


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


KEYS = ApiKeys([KEY, OTHER])


def client(
    backend: FakeBackend, keys: ApiKeys | None = KEYS, key: str | None = KEY, settings: ApiSettings = SETTINGS
) -> httpx.AsyncClient:
    app = make_api(backend, settings, keys)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", headers=headers)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def chat_body(question: str = "Who is Ada?", model: str = "tiny", **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": question}],
        **extra,
    }


# ------------------------------------------------------------------------------------------------ keys


def test_keys_from_env_and_file(tmp_path):
    secrets = tmp_path / "keys.txt"
    secrets.write_text("# rotated monthly\nsk-file-1\n\n  sk-file-2  \nsk-env-1\n")
    keys = load_api_keys("MY_KEYS", secrets, environ={"MY_KEYS": " sk-env-1 , ,sk-env-2"})
    assert keys == ["sk-env-1", "sk-env-2", "sk-file-1", "sk-file-2"]
    assert load_api_keys("MY_KEYS", None, environ={}) == []
    with pytest.raises(AuthConfigError, match="not found"):
        load_api_keys(None, tmp_path / "missing.txt")
    secrets.write_text("sk one\n")
    with pytest.raises(AuthConfigError, match="whitespace"):
        load_api_keys(None, secrets)


def test_bearer_parsing_and_constant_time_check():
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer   abc ") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None
    keys = ApiKeys([KEY, OTHER])
    assert keys.check(KEY) and keys.check(OTHER)
    assert not keys.check(KEY + "x") and not keys.check(KEY[:-1]) and not keys.check("") and not keys.check(None)
    assert KEY not in repr(keys.__dict__)  # only digests are kept
    with pytest.raises(AuthConfigError):
        ApiKeys([])


# ------------------------------------------------------------------------------------------------ auth


def test_healthz_is_open_and_everything_else_needs_a_key(backend, caplog):
    async def go() -> None:
        async with client(backend, key=None) as c:
            assert (await c.get("/healthz")).status_code == 200
            r = await c.get("/v1/models")
            assert r.status_code == 401
            assert r.headers["www-authenticate"] == "Bearer"
            assert r.json()["error"]["type"] == "authentication_error"
            r = await c.post("/v1/chat/completions", json=chat_body(), headers={"Authorization": "Bearer wrong"})
            assert r.status_code == 401
            r = await c.post("/v1/query", json={"question": "q"}, headers={"Authorization": f"Basic {KEY}"})
            assert r.status_code == 401
        async with client(backend, key=OTHER) as c:
            r = await c.get("/v1/models")
            assert r.status_code == 200
            assert [m["id"] for m in r.json()["data"]] == ["tiny", "big"]
            assert r.json()["object"] == "list"

    with caplog.at_level(logging.DEBUG):
        run(go())
    assert backend.calls == []  # nothing reached the backend without a key
    assert KEY not in caplog.text and "wrong" not in caplog.text  # keys (good or bad) are never logged


def test_auth_off_lets_requests_through(backend):
    async def go() -> None:
        async with client(backend, keys=None, key=None) as c:
            assert (await c.get("/v1/models")).status_code == 200

    run(go())


# ---------------------------------------------------------------------------------------------- limits


def test_oversized_body_is_413_before_parsing(backend):
    async def go() -> None:
        async with client(backend) as c:
            # Declared length over the limit: rejected without reading (even though it is not JSON).
            r = await c.post("/v1/chat/completions", content=b"x" * 5000, headers={"Content-Type": "application/json"})
            assert r.status_code == 413
            assert "limit" in r.json()["error"]["message"]

            # Chunked upload with no Content-Length: cut off once it passes the limit.
            async def chunks() -> AsyncIterator[bytes]:
                for _ in range(10):
                    yield b"y" * 1000

            r = await c.post("/v1/query", content=chunks(), headers={"Content-Type": "application/json"})
            assert r.status_code == 413
            # A question over max_question_chars in a body under the byte limit.
            r = await c.post("/v1/query", json={"question": "z" * 600})
            assert r.status_code == 413
            assert "question" in r.json()["error"]["message"]

    run(go())
    assert backend.calls == []


def test_bad_requests_get_clear_errors(backend):
    async def go() -> None:
        async with client(backend) as c:
            r = await c.post(
                "/v1/chat/completions",
                content=b'{"model": "tiny", "messages": [',
                headers={"Content-Type": "application/json"},
            )
            assert r.status_code == 400
            assert "not valid JSON" in r.json()["error"]["message"]
            r = await c.post("/v1/chat/completions", json=[1, 2])
            assert r.status_code == 400
            r = await c.post("/v1/chat/completions", json={"model": "tiny"})
            assert r.status_code == 422
            assert "messages" in r.json()["error"]["message"]
            r = await c.post("/v1/chat/completions", json=chat_body(n=2))
            assert r.status_code == 422
            r = await c.post("/v1/chat/completions", json=chat_body(model="nope"))
            assert r.status_code == 404
            assert r.json()["error"]["code"] == "model_not_found" and "tiny" in r.json()["error"]["message"]
            r = await c.post(
                "/v1/chat/completions", json={"model": "tiny", "messages": [{"role": "system", "content": "x"}]}
            )
            assert r.status_code == 400 and "empty" in r.json()["error"]["message"]
            r = await c.post("/v1/query", json={"question": "q", "bogus": 1})
            assert r.status_code == 422
            r = await c.post("/v1/query", json={"question": "q"}, headers={"x-hxd2-deadline-s": "soon"})
            assert r.status_code == 400
            for bad in ("nan", "inf", "-1", "0"):
                r = await c.post("/v1/query", json={"question": "q"}, headers={"x-hxd2-deadline-s": bad})
                assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_deadline", bad
            r = await c.post("/v1/query", json={"question": "q", "mode": "fast"})
            assert r.status_code == 422 and "auto" in r.json()["error"]["message"]  # the valid modes are listed
            r = await c.post("/v1/chat/completions", json=chat_body(mode="fast"))
            assert r.status_code == 422

    run(go())
    assert backend.calls == []


def test_deeply_nested_json_is_a_400_not_a_500(backend):
    async def go() -> None:
        async with client(
            backend, settings=ApiSettings(indexes=("tiny",), default_index="tiny", max_body_bytes=1 << 20)
        ) as c:
            deep = b"[" * 100_000 + b"]" * 100_000
            for path in ("/v1/chat/completions", "/v1/query"):
                r = await c.post(path, content=deep, headers={"Content-Type": "application/json"})
                assert r.status_code == 400 and "nested too deeply" in r.json()["error"]["message"], path

    run(go())
    assert backend.calls == []


def test_lone_surrogates_are_refused_at_the_edge_on_every_route(backend):
    raw_chat = b'{"model": "tiny", "messages": [{"role": "user", "content": "Who is \\ud800 Ada?"}]}'
    raw_query = b'{"question": "Who is \\ud800 Ada?"}'

    async def go() -> None:
        async with client(backend) as c:
            for path, raw in (("/v1/chat/completions", raw_chat), ("/v1/query", raw_query)):
                r = await c.post(path, content=raw, headers={"Content-Type": "application/json"})
                assert r.status_code == 400, (path, r.text)
                assert r.json()["error"]["code"] == "invalid_text" and "U+D800" in r.json()["error"]["message"]
            body = chat_body(stream=True)
            raw = json.dumps(body).replace("Who is Ada?", "Who is \\udfff Ada?").encode()
            r = await c.post("/v1/chat/completions", content=raw, headers={"Content-Type": "application/json"})
            assert r.status_code == 400

    run(go())
    assert backend.calls == []  # refused before any work


def test_backpressure_from_the_backend_is_503_with_retry_after(backend):
    backend.fail = ApiError(503, "at capacity", headers={"Retry-After": "2"})

    async def go() -> None:
        async with client(backend) as c:
            for body, path in (
                (chat_body(), "/v1/chat/completions"),
                (chat_body(stream=True), "/v1/chat/completions"),
                ({"question": "q"}, "/v1/query"),
            ):
                r = await c.post(path, json=body)
                assert r.status_code == 503, path
                assert r.headers["retry-after"] == "2"
                assert r.json()["error"]["type"] == "overloaded_error"

    run(go())


# ---------------------------------------------------------------------------------------------- shapes


def test_chat_completion_and_query_shapes(backend):
    async def go() -> None:
        async with client(backend) as c:
            r = await c.post("/v1/chat/completions", json=chat_body("Who is Ada?", model="big"))
            assert r.status_code == 200
            body = r.json()
            assert body["object"] == "chat.completion" and body["model"] == "big"
            assert body["choices"][0]["message"] == {"role": "assistant", "content": "about Who is Ada?"}
            assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
            assert body["path"] == "dual_level" and body["references"][0]["source_id"] == "a.md"
            assert body["mode"] == "auto" and body["fallback_reason"] == "plan failed: no plan"
            r = await c.post("/v1/query", json={"question": "Who?", "trace": True, "mode": "dual"})
            body = r.json()
            assert body["index"] == "tiny" and body["answer"] == "about Who?" and "trace" in body
            assert body["mode"] == "dual" and "fallback_reason" not in body  # None is left out
            assert backend.calls == [("big", "Who is Ada?", False), ("tiny", "Who?", True)]
            assert backend.modes == [None, "dual"]
            # the topic travels as a field: on /v1/query and in a chat completion's extra_body (top-level keys)
            await c.post("/v1/query", json={"question": "who directed The Public Eye", "topic": "The Public Eye"})
            await c.post("/v1/chat/completions", json=chat_body("who directed it", model="big", topic="Omagh"))
            assert backend.topics == [None, None, "The Public Eye", "Omagh"]

    run(go())


def test_streaming_is_server_sent_events_ending_with_done(backend):
    async def go() -> list[str]:
        async with client(backend) as c:
            r = await c.post(
                "/v1/chat/completions", json=chat_body(stream=True, stream_options={"include_usage": True})
            )
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            return [line for line in r.text.split("\n") if line]

    lines = run(go())
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks if ch["choices"])
    assert text == "about it"
    finals = [ch for ch in chunks if ch["choices"] and ch["choices"][0].get("finish_reason")]
    assert len(finals) == 1 and finals[0]["path"] == "dual_level"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 12
    assert len({ch["id"] for ch in chunks}) == 1


def test_guard_passes_streamed_bodies_and_disconnects_through():
    seen: dict[str, Any] = {}

    async def app(scope, receive, send):
        first = await receive()
        seen["body"] = first["body"]
        seen["next"] = (await receive())["type"]
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    messages = [
        {"type": "http.request", "body": b"ab", "more_body": True},
        {"type": "http.request", "body": b"cd", "more_body": False},
        {"type": "http.disconnect"},
    ]

    async def receive():
        return messages.pop(0)

    sent: list[dict[str, Any]] = []

    async def send(message):
        sent.append(message)

    guard = GuardMiddleware(app, keys=None, max_body_bytes=10)
    scope = {"type": "http", "method": "POST", "path": "/v1/query", "headers": []}
    asyncio.run(guard(scope, receive, send))
    assert seen == {"body": b"abcd", "next": "http.disconnect"}
    assert sent[0]["status"] == 204


# ------------------------------------------------------------------------------------------ pure bits


def test_question_is_the_last_user_message():
    req = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "a"},
                {"role": "user", "content": [{"type": "text", "text": "second "}, {"type": "text", "text": "part"}]},
            ],
        }
    )
    assert req.question() == "second part"


def test_app_args_validation():
    args = ServeAppArgs.model_validate({"indexes": {"a": "/x", "b": "s3://bucket/idx"}})
    assert args.default == "a" and args.auth is True
    with pytest.raises(ValueError):
        ServeAppArgs.model_validate({"indexes": {}})
    with pytest.raises(ValueError):
        ServeAppArgs.model_validate({"indexes": {"a/b": "/x"}})
    with pytest.raises(ValueError):
        ServeAppArgs.model_validate({"indexes": {"a": "/x"}, "default_index": "b"})
    with pytest.raises(ValueError):
        ServeAppArgs.model_validate({"indexes": {"a": "/x"}, "unknown": 1})


def test_scripted_query_replies():
    from hxd2_ray.llm.base import LLMRequest
    from hxd2_ray.llm.scripted import ScriptedLLM

    llm = ScriptedLLM(reject_when=("[no]",))

    def reply(content: str, tag: str) -> str:
        return llm.complete([LLMRequest(messages=({"role": "user", "content": content},), tag=tag)])[0].text

    kw = reply("Question: Where does Robert Malenka work?", "keywords")
    assert json.loads(kw)["low_level_keywords"] == ["Robert Malenka"]
    prompt = "## Entities\nid,entity,type\n1,Robert Malenka,person,x,2\n\n## Question\nWhere?"
    assert reply(prompt, "answer") == "Scripted answer to: Where? The context names Robert Malenka."
    plan = json.loads(reply("Relation names: x\nQuestion: Who is Robert Malenka?", "logic_plan"))
    assert plan["steps"][0]["action"]["args"] == {"s": "Robert Malenka", "p": None, "o": None}
    assert json.loads(reply("Question: what now?", "logic_plan")) == {"steps": []}  # no name: an empty plan
    assert reply("## Evidence\nx\n\nQuestion: Who?", "logic_verify_pre") == "yes"
    assert reply("## Evidence\nx\n\nQuestion: Who? [no]", "logic_verify_pre") == "no"


# ------------------------------------------------------------------------------------------- hxd2 serve


def test_serve_cli_plan_merges_the_serve_config_and_flags(tmp_path, monkeypatch):
    from jobs.serve_cli import DEFAULT_SERVE_CONFIG, main, plan

    index = tmp_path / "my-index"
    index.mkdir()
    monkeypatch.setenv("HXD2_API_KEYS", "sk-a,sk-b")
    args, http, ns = plan(
        [
            "--index",
            str(index),
            "--index",
            f"other={index}",
            "--port",
            "9123",
            "--set",
            "retrieval.top_k_entities=3",
            "--serve-config",
            str(DEFAULT_SERVE_CONFIG),
        ]
    )
    assert args["indexes"] == {"my-index": str(index), "other": str(index)}
    assert "default_index" not in args  # the file's default named an index that is not served here
    assert args["overrides"] == ["retrieval.top_k_entities=3"]
    assert http["host"] == "127.0.0.1" and http["port"] == 9123 and http["request_timeout_s"] == 120
    # The file's deployments list becomes deployment_options, checked by the same args model Serve uses.
    assert args["deployment_options"]["Retriever"]["max_ongoing_requests"] == 64
    assert args["deployment_options"]["LLM"]["ray_actor_options"] == {"num_cpus": 1}
    assert args["embedder"] == "in_replica" and "Embedder" not in args["deployment_options"]  # CPU default
    ServeAppArgs.model_validate(args)
    with pytest.raises(ValueError, match="'deployment' or 'in_replica'"):
        ServeAppArgs.model_validate({**args, "embedder": "gpu"})

    with pytest.raises(ValueError, match="no folder"):
        plan(["--index", str(tmp_path / "missing")])
    monkeypatch.delenv("HXD2_API_KEYS")
    with pytest.raises(ValueError, match="HXD2_API_KEYS"):
        plan(["--index", str(index)])
    with pytest.raises(ValueError, match="loopback"):
        plan(["--index", str(index), "--no-auth", "--host", "0.0.0.0"])
    assert plan(["--index", str(index), "--no-auth"])[0]["auth"] is False
    assert main(["--index", str(tmp_path / "missing")]) == 2


# --------------------------------------------------------------------------------- deadlines (handles)


class _FakeResponse:
    """A DeploymentResponse stand-in. ``honour_timeout=False`` makes ``result`` ignore its timeout, so only
    ``cancel()`` can end the wait early: a test of cancellation then cannot pass (or fail) by a timer race."""

    def __init__(self, value: Any, delay: float = 0.0, honour_timeout: bool = True):
        import threading

        self.value, self.delay, self.cancelled, self.timeouts = value, delay, False, []
        self.honour_timeout = honour_timeout
        self.cancelled_event = threading.Event()

    def result(self, timeout_s: float | None = None) -> Any:
        import time as _time

        self.timeouts.append(timeout_s)
        start = _time.monotonic()
        while (waited := _time.monotonic() - start) < self.delay:
            if self.cancelled:
                raise RuntimeError("cancelled")
            if self.honour_timeout and timeout_s is not None and waited >= timeout_s:
                raise TimeoutError("timed out")
            _time.sleep(0.01)
        return self.value

    def cancel(self) -> None:
        self.cancelled = True
        self.cancelled_event.set()


class _FakeMethod:
    def __init__(self, responses: list[_FakeResponse]):
        self.responses = responses

    def remote(self, *args: Any) -> _FakeResponse:
        return self.responses.pop(0)


class _FakeHandle:
    def __init__(self, **methods: list[_FakeResponse]):
        for name, responses in methods.items():
            setattr(self, name, _FakeMethod(responses))

    def options(self, **_: Any) -> "_FakeHandle":
        return self


def test_handle_calls_wait_at_most_the_time_left_and_are_cancelled_with_the_request():
    from concurrent.futures import ThreadPoolExecutor

    from hxd2_ray.config import HashingEmbeddingConfig, ScriptedLLMConfig
    from hxd2_ray.llm.base import LLMRequest, LLMResponse
    from serve.handles import DeadlineExceeded, HandleEmbedder, HandleLLM, RequestScope, run_in_thread

    fast = _FakeResponse([LLMResponse("ok")])
    slow = _FakeResponse([LLMResponse("late")], delay=float("inf"), honour_timeout=False)
    llm = HandleLLM(_FakeHandle(complete=[fast, slow]), ScriptedLLMConfig())
    req = [LLMRequest(messages=({"role": "user", "content": "q"},))]
    assert llm.count_tokens("one two") == 3  # local, the scripted estimate (1.3 per word)
    pool = ThreadPoolExecutor(2)

    async def go() -> None:
        assert (await run_in_thread(pool, RequestScope.after(2.0), llm.complete, req))[0].text == "ok"
        assert 0 < fast.timeouts[0] <= 2.0  # bounded by the deadline
        scope = RequestScope.after(0.2)
        with pytest.raises(DeadlineExceeded):
            await run_in_thread(pool, scope, llm.complete, req)
        assert scope.cancelled
        # The blocked call ignores its own timeout and would never end: only the request's cancellation frees it.
        assert await asyncio.to_thread(slow.cancelled_event.wait, 60)

    run(go())
    import numpy as np

    vecs = np.ones((2, 4), dtype=np.float32)
    emb = HandleEmbedder(_FakeHandle(embed=[_FakeResponse(vecs)]), HashingEmbeddingConfig(dim=4))
    assert emb.embed(["a", "b"]).shape == (2, 4) and emb.embed([]).shape == (0, 4)
    pool.shutdown()


def test_a_query_whose_deadline_passes_while_it_waits_for_a_thread_never_starts():
    """A Retriever replica queues the queries beyond its threads in the pool (serve/app.py QUEUED_PER_THREAD): one
    that runs out of time there ends 504 at its deadline and its work is not started when a thread frees."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from serve.handles import DeadlineExceeded, RequestScope, run_in_thread

    pool = ThreadPoolExecutor(1)
    release, started = threading.Event(), []

    async def go() -> None:
        busy = asyncio.ensure_future(run_in_thread(pool, RequestScope.after(30.0), release.wait, 30))
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            await run_in_thread(pool, RequestScope.after(0.2), started.append, "queued")
        assert time.monotonic() - t0 < 1.0  # at its deadline, not when the thread frees
        release.set()
        assert await busy is True
        assert await run_in_thread(pool, RequestScope.after(2.0), started.append, "later") is None

    run(go())
    pool.shutdown(wait=True)
    assert started == ["later"]


def test_stream_error_after_the_first_event_ends_the_sse_cleanly(backend):
    class Failing(FakeBackend):
        async def answer_stream(self, index, question, trace, deadline, mode=None, topic=None):
            yield {"type": "delta", "text": "partial"}
            yield {"type": "error", "error": {"status": 504, "message": "the request deadline passed"}}

    async def go() -> list[str]:
        async with client(Failing()) as c:
            r = await c.post("/v1/chat/completions", json=chat_body(stream=True))
            assert r.status_code == 200
            return [line for line in r.text.split("\n") if line]

    lines = run(go())
    assert lines[-1] == "data: [DONE]"
    error = json.loads(lines[-2][6:])
    assert error["error"]["type"] == "timeout_error" and "deadline" in error["error"]["message"]


def test_in_replica_embedder_refuses_embedder_sizing(tmp_path):
    from serve.app import build_app

    with pytest.raises(ValueError, match="Embedder.*in_replica"):
        build_app(
            {
                "indexes": {"x": str(tmp_path)},
                "embedder": "in_replica",
                "deployment_options": {"Embedder": {"num_replicas": 2}},
            }
        )


def test_build_app_checks_local_indexes_against_the_config_before_deploying(tmp_path):
    from hxd2_ray.errors import IndexMismatchError
    from serve.app import build_app
    from tests.unit.retrieval_fixtures import build_tiny_index

    tiny = build_tiny_index(tmp_path / "tiny")
    config = {"llm": {"backend": "scripted"}, "embedding": {"backend": "hashing", "dim": 64}}
    with pytest.raises(IndexMismatchError, match=r"index 'tiny'.*dim 128.*dim 64"):
        build_app({"indexes": {"tiny": str(tiny.root)}, "config_data": config, "auth": False})
    # Without a config, the index's own is used: nothing to contradict.
    assert build_app({"indexes": {"tiny": str(tiny.root)}, "auth": False}) is not None


def test_a_failed_deployment_is_explained_by_its_replica_error():
    from types import SimpleNamespace

    from jobs.serve_cli import deployment_failures

    message = (
        "The deployment failed to start 3 times in a row. This may be due to a problem with its constructor "
        "or initial health check failing. See controller logs for details. Error:\n"
        'Traceback (most recent call last):\n  File "serve/deployments.py", line 1, in __init__\n'
        "    self.indexes = _open_indexes(indexes, self.cfg)\n"
        "hxd2_ray.errors.IndexMismatchError: the index was built with embedding model 'hashing-v1' (dim 128)"
    )
    status = SimpleNamespace(
        deployments={
            "Retriever": SimpleNamespace(status="DEPLOY_FAILED", message=message),
            "LLM": SimpleNamespace(status="HEALTHY", message=""),
        }
    )
    assert deployment_failures(status) == [
        "Retriever: hxd2_ray.errors.IndexMismatchError: the index was built with embedding model 'hashing-v1' (dim 128)"
    ]
    assert deployment_failures(None) == []
