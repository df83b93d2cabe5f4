"""LLM protocol: a batch of chat requests in, one response per request out, in order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Protocol, Sequence

Message = Mapping[str, str]  # {"role": "system"|"user"|"assistant", "content": ...}


@dataclass(frozen=True, slots=True)
class LLMRequest:
    messages: tuple[Message, ...]
    max_tokens: int = 512
    temperature: float = 0.0
    json_schema: Mapping[str, Any] | None = None  # constrained decoding where the backend supports it
    choices: tuple[str, ...] | None = None  # constrain the reply to one of these strings
    tag: str = ""  # what the call is for (extract, glean, judge, summarize…); used by fakes and metrics


@dataclass(frozen=True, slots=True)
class LLMResponse:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    error: str = ""  # non-empty when this one request failed; the batch still returns


@dataclass
class LLMUsage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failures: int = 0
    by_tag: dict[str, int] = field(default_factory=dict)

    def add(self, req: LLMRequest, resp: LLMResponse) -> None:
        self.calls += 1
        self.prompt_tokens += resp.prompt_tokens
        self.completion_tokens += resp.completion_tokens
        self.failures += bool(resp.error)
        self.by_tag[req.tag] = self.by_tag.get(req.tag, 0) + 1


class LLMClient(Protocol):
    model_id: str
    supports_json_schema: bool

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        """Answer every request; one failing request sets its ``error`` instead of raising for the batch."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under the serving model's tokenizer."""
        ...


class LLMWrapper:
    """Base of the wrappers that add one behaviour around an :class:`LLMClient` (a lock, an error tally…).

    Everything the wrapper does not define is the wrapped client's (``count_tokens``, ``max_model_len``,
    ``close``…). ``stream`` exists only where the wrapped client streams (callers test for it), and then goes
    through the subclass's ``_stream``.
    """

    def __init__(self, inner: LLMClient):
        self.inner = inner
        if callable(getattr(inner, "stream", None)):
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
        return bool(getattr(self.inner, "thread_safe", False))

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        return self.inner.complete(requests)

    def _stream(self, request: LLMRequest) -> Iterator[str]:
        yield from self.inner.stream(request)  # type: ignore[attr-defined]
