"""A model behind an OpenAI-protocol server (``vllm serve``, Ollama, a hosted API), through the official SDK.

Two faces over one request path:

* :class:`OpenAIAsyncEngine`: the :class:`~hxd2_ray.llm.base.AsyncLLMEngine` surface the Serve LLM deployment
  awaits (``complete``, ``stream``, ``check_health``);
* :class:`OpenAILLM`: the synchronous :class:`~hxd2_ray.llm.base.LLMClient` (and ``StreamingLLM``) every other
  stage takes. It runs the async engine on an event loop of its own thread, so one ``complete`` call sends its
  whole batch at once: an extraction actor keeps up to ``max_concurrency`` requests in flight, and the server
  batches them (one request at a time would leave a remote GPU mostly idle).

Faults: the SDK retries 408/409/429/5xx, timeouts and lost connections ``max_retries`` times with backoff,
honouring ``Retry-After``. On top of that a reply the SDK could not read (a body cut off mid-way) or, for a
request with a JSON schema, a reply that is not JSON, is asked again within the same bound. A request that still
fails comes back with ``error`` set, never raised for the batch, so the extractor's own per-request retries and
failed-chunk accounting apply as with the in-process engine.

The API key is read from the environment variable ``api_key_env`` names at each call (the SDK's key provider),
is never stored on this object, and is scrubbed from every error text this module produces.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, AsyncGenerator, AsyncIterator, Iterator, Sequence, TypeVar

import openai

from hxd2_ray.config import OpenAILLMConfig
from hxd2_ray.errors import BackendError, HxdError
from hxd2_ray.llm.base import LLMRequest, LLMResponse
from hxd2_ray.llm.tokens import build_token_counter

log = logging.getLogger(__name__)

# Sent when the key's variable is unset: the SDK insists on some key, and a local server ignores it.
NO_KEY = "no-key"
# Seconds the start-up check waits for the server's model list.
PREFLIGHT_TIMEOUT_S = 10.0
_T = TypeVar("_T")


def _secret(cfg: OpenAILLMConfig) -> str:
    return os.environ.get(cfg.api_key_env, "")


def scrub(text: str, cfg: OpenAILLMConfig) -> str:
    """``text`` with the API key (should a server echo it back) replaced by the variable's name."""
    secret = _secret(cfg)
    return text.replace(secret, f"${cfg.api_key_env}") if len(secret) >= 4 else text


def _describe(exc: BaseException, cfg: OpenAILLMConfig) -> str:
    status = getattr(exc, "status_code", None)
    what = f"{type(exc).__name__}" + (f" (HTTP {status})" if status else "")
    return scrub(f"{what} from {cfg.base_url}: {exc}", cfg)[:2000]


def _new_client(cfg: OpenAILLMConfig, *, max_retries: int | None = None, timeout_s: float | None = None) -> Any:
    async def api_key() -> str:  # read at each call: a rotated key is picked up, and none is kept here
        return _secret(cfg) or NO_KEY

    return openai.AsyncOpenAI(
        base_url=cfg.base_url,
        api_key=api_key,
        timeout=cfg.timeout_s if timeout_s is None else timeout_s,
        max_retries=cfg.max_retries if max_retries is None else max_retries,
    )


@dataclass
class OpenAIStats:
    """Counters for the Serve deployment's ``stats`` call and the bench."""

    requests: int = 0
    failed: int = 0
    reasked: int = 0  # replies asked again because they were unreadable or off-schema
    in_flight: int = 0
    max_in_flight: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class OpenAIAsyncEngine:
    """Chat completions over the OpenAI protocol, at most ``max_concurrency`` in flight (per event loop)."""

    supports_json_schema = True  # the schema is sent as response_format, and the reply is checked to be JSON

    def __init__(self, cfg: OpenAILLMConfig) -> None:
        self.cfg = cfg
        self.model_id = cfg.model
        self.max_model_len = cfg.max_model_len
        self.stats = OpenAIStats()
        self._count = build_token_counter(cfg)
        self._send_schema = cfg.json_schema
        # The SDK's HTTP client and the semaphore belong to the loop that first uses them (Serve's, or the loop
        # thread of OpenAILLM); they are made there, lazily.
        self._client: Any = None
        self._gate: asyncio.Semaphore | None = None

    def _ready(self) -> tuple[Any, asyncio.Semaphore]:
        if self._client is None or self._gate is None:
            self._client = _new_client(self.cfg)
            self._gate = asyncio.Semaphore(self.cfg.max_concurrency)
        return self._client, self._gate

    # ---------------------------------------------------------------- tokens

    def count_tokens(self, text: str) -> int:
        return int(self._count(text))

    # ------------------------------------------------------------ requests

    def _params(self, req: LLMRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.cfg.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in req.messages],
            "max_tokens": max(1, req.max_tokens),
            "temperature": req.temperature,
        }
        if req.stop:
            params["stop"] = list(req.stop)
        if req.json_schema is not None and self._send_schema:
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": dict(req.json_schema)},
            }
        return params

    async def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        """One response per request, in order, all sent at once (the semaphore bounds what is in flight)."""
        return list(await asyncio.gather(*(self._complete_one(r) for r in requests)))

    async def _complete_one(self, req: LLMRequest) -> LLMResponse:
        client, gate = self._ready()
        self.stats.requests += 1
        problem = ""
        for attempt in range(self.cfg.max_retries + 1):
            params = self._params(req)
            try:
                async with gate:
                    self._enter()
                    try:
                        reply = await client.chat.completions.create(**params)
                    finally:
                        self.stats.in_flight -= 1
            except openai.BadRequestError as exc:
                if "response_format" in params and _about_schema(exc):
                    # The server has no structured output: from now on replies go to the plain parser.
                    log.warning("%s rejects response_format; sending requests without a JSON schema", self.cfg.base_url)
                    self._send_schema = False
                    continue
                return self._failed(_describe(exc, self.cfg))
            except openai.APIStatusError as exc:  # 4xx other than 400, or 5xx after the SDK's retries
                return self._failed(_describe(exc, self.cfg))
            except (openai.APIConnectionError, openai.APITimeoutError) as exc:  # after the SDK's retries
                return self._failed(_describe(exc, self.cfg))
            except (openai.APIResponseValidationError, ValueError) as exc:
                problem = f"unreadable reply: {_describe(exc, self.cfg)}"  # a body cut off mid-way: ask again
            else:
                response, problem = self._read(reply, req, schema_sent="response_format" in params)
                if not problem:
                    return response
            if attempt < self.cfg.max_retries:
                self.stats.reasked += 1
                log.warning("asking again (%d/%d): %s", attempt + 1, self.cfg.max_retries, problem[:200])
        return self._failed(f"{problem} (after {self.cfg.max_retries + 1} attempts)")

    def _enter(self) -> None:
        self.stats.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)

    def _failed(self, error: str) -> LLMResponse:
        self.stats.failed += 1
        return LLMResponse(text="", finish_reason="error", error=error)

    def _read(self, reply: Any, req: LLMRequest, schema_sent: bool) -> tuple[LLMResponse, str]:
        """The response, and what is wrong with it ("" when nothing)."""
        choices = getattr(reply, "choices", None) or []
        if not choices:
            return LLMResponse(text=""), "the reply holds no choice"
        choice = choices[0]
        text = (choice.message.content if choice.message is not None else None) or ""
        finish = choice.finish_reason or "stop"
        usage = getattr(reply, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0) or sum(
            self.count_tokens(m["content"]) for m in req.messages
        )
        completion = int(getattr(usage, "completion_tokens", 0) or 0) or self.count_tokens(text)
        self.stats.prompt_tokens += prompt
        self.stats.completion_tokens += completion
        # The server's prefix-cache hits for this prompt, where it reports them (vLLM: --enable-prompt-tokens-details).
        details = getattr(usage, "prompt_tokens_details", None)
        cached = int(getattr(details, "cached_tokens", 0) or 0)
        response = LLMResponse(
            text=text, prompt_tokens=prompt, completion_tokens=completion, finish_reason=finish, cached_tokens=cached
        )
        # A reply cut by max_tokens ("length") is passed on as the in-process engine does: the parser keeps the
        # records it can read, and asking again would get the same cut reply.
        if schema_sent and finish != "length" and not _is_json(text):
            return response, f"off-schema reply (not JSON): {text[:80]!r}"
        return response, ""

    async def stream(self, request: LLMRequest) -> AsyncGenerator[str, None]:
        """Text deltas of the reply (``stream=True``); raises :class:`BackendError` on failure. Closing the
        generator early closes the HTTP stream, and the server stops generating."""
        client, gate = self._ready()
        params = self._params(request)
        self.stats.requests += 1
        async with gate:
            self._enter()
            try:
                chunks = await client.chat.completions.create(**params, stream=True)
                try:
                    async for chunk in chunks:
                        delta = chunk.choices[0].delta.content if chunk.choices else None
                        if delta:
                            yield delta
                finally:
                    await chunks.close()
            except openai.OpenAIError as exc:
                self.stats.failed += 1
                raise BackendError(_describe(exc, self.cfg)) from None
            finally:
                self.stats.in_flight -= 1

    async def check_health(self) -> None:
        client, _ = self._ready()
        try:
            await client.models.list()
        except Exception as exc:  # noqa: BLE001 - any failure makes the replica unhealthy
            raise BackendError(_describe(exc, self.cfg)) from None

    def snapshot(self) -> dict[str, Any]:
        return {
            **vars(self.stats),
            "backend": "openai",
            "model_id": self.model_id,
            "base_url": self.cfg.base_url,
            "max_model_len": self.max_model_len,
        }

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def close(self) -> None:
        """Drop the HTTP client (its connections close with it); :meth:`aclose` closes them at once."""
        self._client = None


class OpenAILLM:
    """The synchronous :class:`LLMClient` over :class:`OpenAIAsyncEngine`, whose loop runs in a thread of its
    own. Thread-safe: calls from many threads share the loop, the client and the concurrency bound."""

    supports_json_schema = True
    thread_safe = True

    def __init__(self, cfg: OpenAILLMConfig) -> None:
        self.engine = OpenAIAsyncEngine(cfg)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="openai-llm", daemon=True)
        self._thread.start()

    @property
    def model_id(self) -> str:
        return self.engine.model_id

    @property
    def max_model_len(self) -> int | None:
        return self.engine.max_model_len

    @property
    def stats(self) -> OpenAIStats:
        return self.engine.stats

    def count_tokens(self, text: str) -> int:
        return self.engine.count_tokens(text)

    def _run(self, coro: Any) -> Future[Any]:
        if self._loop.is_closed():
            raise RuntimeError("OpenAILLM is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        if not requests:
            return []
        result: list[LLMResponse] = self._run(self.engine.complete(list(requests))).result()
        return result

    def stream(self, request: LLMRequest) -> Iterator[str]:
        deltas = self.engine.stream(request)
        try:
            while True:
                try:
                    yield self._run(_next(deltas)).result()
                except StopAsyncIteration:
                    return
        finally:
            if not self._loop.is_closed():
                self._run(deltas.aclose()).result(timeout=30)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self.engine.aclose()).result(timeout=10)
        except Exception as exc:  # noqa: BLE001 - the loop is stopped either way
            log.warning("closing the HTTP client failed: %s: %s", type(exc).__name__, exc)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> "OpenAILLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _next(deltas: AsyncIterator[_T]) -> _T:
    return await deltas.__anext__()


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _about_schema(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "response_format" in text or "json_schema" in text


# ------------------------------------------------------------------------------------------- preflight


def check_server(cfg: OpenAILLMConfig) -> None:
    """Fail fast, before any work starts, when the server is down, refuses the key, or does not serve
    ``cfg.model``: an :class:`HxdError` of one line that names the URL (and never the key)."""
    # The synchronous client: this runs in the CLI before anything else, and maybe inside someone's event loop.
    client = openai.OpenAI(
        base_url=cfg.base_url,
        api_key=lambda: _secret(cfg) or NO_KEY,
        max_retries=0,
        timeout=min(cfg.timeout_s, PREFLIGHT_TIMEOUT_S),
    )
    try:
        served = [m.id for m in client.models.list()]
    except (openai.APIConnectionError, openai.APITimeoutError) as exc:
        raise HxdError(
            f"the LLM server at {cfg.base_url} is not reachable ({type(exc).__name__}); start it, or "
            "set llm.base_url to where it runs"
        ) from None
    except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
        raise HxdError(
            f"the LLM server at {cfg.base_url} refused the key in ${cfg.api_key_env} (HTTP {exc.status_code})"
        ) from None
    except openai.APIStatusError:
        return  # some servers have no model list; the first request will say what is wrong
    finally:
        client.close()
    if served and cfg.model not in served:
        raise HxdError(
            f"the LLM server at {cfg.base_url} does not serve model {cfg.model!r}; it serves "
            f"{sorted(served)[:10]} (set llm.model)"
        )
