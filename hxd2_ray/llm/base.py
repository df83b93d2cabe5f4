"""The LLM seam: a batch of chat requests in, one response per request out, in order.

Three protocols, from what every backend offers to what some do:

* :class:`LLMClient`: ``complete`` a batch, ``count_tokens`` with the serving model's tokenizer, and the declared
  facts callers plan with (``thread_safe``, ``max_model_len``) — declared, never probed;
* :class:`StreamingLLM`: also ``stream`` one reply as text deltas (answers reach a client while they are written);
* :class:`AsyncLLMEngine`: the async surface of a serving engine (vLLM's ``AsyncLLM``, the scripted fake) that a
  Serve deployment awaits.

:class:`LLMWrapper` is the base of the wrappers in :mod:`hxd2_ray.llm.wrappers` that add one behaviour around a
client (a lock with cancellation, an error tally); it streams exactly when the wrapped client does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Iterator, Mapping, Protocol, Sequence, runtime_checkable

Message = Mapping[str, str]  # {"role": "system"|"user"|"assistant", "content": ...}


@dataclass(frozen=True, slots=True)
class LLMRequest:
    messages: tuple[Message, ...]
    max_tokens: int = 512
    temperature: float = 0.0
    json_schema: Mapping[str, Any] | None = None  # constrained decoding where the backend supports it
    choices: tuple[str, ...] | None = None  # constrain the reply to one of these strings
    stop: tuple[str, ...] = ()  # generation ends at the first of these strings (left out of the reply)
    tag: str = ""  # what the call is for (extract, glean, judge, summarize…); used by fakes and metrics


@dataclass(frozen=True, slots=True)
class LLMResponse:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    error: str = ""  # non-empty when this one request failed; the batch still returns
    cached_tokens: int = 0  # of prompt_tokens, those the engine reused from its prefix cache (not computed)


@dataclass
class TagUsage:
    """Calls, tokens and failures counted over responses (of one tag; :class:`LLMUsage`: of a whole client)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failures: int = 0
    cached_tokens: int = 0  # prompt tokens served from the engine's prefix cache

    def count(self, resp: LLMResponse) -> None:
        self.calls += 1
        self.prompt_tokens += resp.prompt_tokens
        self.cached_tokens += resp.cached_tokens
        self.completion_tokens += resp.completion_tokens
        self.failures += bool(resp.error)


@dataclass
class LLMUsage(TagUsage):
    by_tag: dict[str, int] = field(default_factory=dict)  # calls per request tag

    def add(self, req: LLMRequest, resp: LLMResponse) -> None:
        self.count(resp)
        self.by_tag[req.tag] = self.by_tag.get(req.tag, 0) + 1


class LLMClient(Protocol):
    @property
    def model_id(self) -> str: ...

    @property
    def supports_json_schema(self) -> bool: ...

    @property
    def thread_safe(self) -> bool:
        """True: ``complete``/``stream`` may be called from many threads at once and are batched together (vLLM's
        async engine behind a thread-safe facade, a Serve handle); False: callers serialize (the offline engine)."""
        ...

    @property
    def max_model_len(self) -> int | None:
        """The model's context in tokens (prompt + completion), or None when the backend has no limit (the fake)."""
        ...

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        """Answer every request; one failing request sets its ``error`` instead of raising for the batch."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under the serving model's tokenizer."""
        ...


@runtime_checkable
class StreamingLLM(Protocol):
    """An :class:`LLMClient` that can also yield one reply as it is generated."""

    def stream(self, request: LLMRequest) -> Iterator[str]:
        """Text deltas of the reply to ``request``; raise on failure. Closing the iterator early aborts it."""
        ...


class AsyncLLMEngine(Protocol):
    """The async surface a serving deployment awaits (continuous batching over every request in flight)."""

    @property
    def model_id(self) -> str: ...

    @property
    def max_model_len(self) -> int | None: ...

    async def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]: ...

    def stream(self, request: LLMRequest) -> AsyncIterator[str]: ...

    def count_tokens(self, text: str) -> int: ...

    async def check_health(self) -> None: ...

    def close(self) -> None: ...


class LLMWrapper:
    """Base of the wrappers that add one behaviour around an :class:`LLMClient` (a lock, an error tally…).

    Everything the wrapper does not define is the wrapped client's (``count_tokens``, ``max_model_len``,
    ``close``…). ``stream`` exists only where the wrapped client streams (callers test for it), and then goes
    through the subclass's ``_stream``.
    """

    def __init__(self, inner: LLMClient):
        self.inner = inner
        if isinstance(inner, StreamingLLM):
            self.stream = self._stream

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copy/pickle): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def supports_json_schema(self) -> bool:
        return bool(getattr(self.inner, "supports_json_schema", False))

    @property
    def thread_safe(self) -> bool:
        return self.inner.thread_safe

    @property
    def max_model_len(self) -> int | None:
        return self.inner.max_model_len

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        return self.inner.complete(requests)

    def _stream(self, request: LLMRequest) -> Iterator[str]:
        yield from self.inner.stream(request)  # type: ignore[attr-defined]
