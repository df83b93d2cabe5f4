"""Streaming seam for answer generation.

:class:`StreamingLLM` is the optional extension of :class:`~hxd2_ray.llm.base.LLMClient` that yields the
answer as it is generated. Backends without ``stream`` (ScriptedLLM, a batch-only engine) still work:
:func:`stream_completion` falls back to one ``complete`` call and yields the whole text at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol, runtime_checkable

from hxd2_ray.errors import BackendError
from hxd2_ray.llm.base import LLMClient, LLMRequest, LLMResponse


@runtime_checkable
class StreamingLLM(Protocol):
    def stream(self, request: LLMRequest) -> Iterator[str]:
        """Yield text deltas of the reply to ``request``; raise on failure."""
        ...


@dataclass
class StreamOutcome:
    """Filled in while :func:`stream_completion` runs: what the caller reports once the stream ends."""

    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    streamed: bool = False  # True when the backend streamed, False for the one-shot fallback


def supports_streaming(llm: object) -> bool:
    return callable(getattr(llm, "stream", None))


def stream_completion(llm: LLMClient, request: LLMRequest, outcome: StreamOutcome | None = None) -> Iterator[str]:
    """Text deltas of the reply; the whole reply as one delta when ``llm`` cannot stream.

    Raises :class:`BackendError` when the backend reports a failed request.
    """
    outcome = outcome if outcome is not None else StreamOutcome()
    if supports_streaming(llm):
        outcome.streamed = True
        parts: list[str] = []
        for delta in llm.stream(request):  # type: ignore[attr-defined]
            if delta:
                parts.append(delta)
                yield delta
        outcome.text = "".join(parts)
        count = getattr(llm, "count_tokens", None)
        if callable(count):
            outcome.completion_tokens = int(count(outcome.text))
        return
    response = complete_one(llm, request)
    outcome.text = response.text
    outcome.prompt_tokens = response.prompt_tokens
    outcome.completion_tokens = response.completion_tokens
    outcome.finish_reason = response.finish_reason
    if response.text:
        yield response.text


def complete_one(llm: LLMClient, request: LLMRequest) -> LLMResponse:
    responses = llm.complete([request])
    if len(responses) != 1:
        raise BackendError(f"the LLM returned {len(responses)} responses for one request")
    response = responses[0]
    if response.error:
        raise BackendError(f"the LLM failed on the {request.tag or 'request'}: {response.error}")
    return response
