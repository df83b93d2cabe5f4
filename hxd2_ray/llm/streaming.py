"""One call to the LLM seam, streamed when the backend can and whole when it cannot.

Backends without ``stream`` (the scripted fake, the offline engine) still work: :func:`stream_completion` falls
back to one ``complete`` call and yields the whole text at once, so callers are written once, for streaming.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from hxd2_ray.errors import BackendError
from hxd2_ray.llm.base import LLMClient, LLMRequest, LLMResponse, StreamingLLM


@dataclass
class StreamOutcome:
    """Filled in while :func:`stream_completion` runs: what the caller reports once the stream ends."""

    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    streamed: bool = False  # True when the backend streamed, False for the one-shot fallback


def supports_streaming(llm: object) -> bool:
    return isinstance(llm, StreamingLLM)


def stream_completion(llm: LLMClient, request: LLMRequest, outcome: StreamOutcome | None = None) -> Iterator[str]:
    """Text deltas of the reply; the whole reply as one delta when ``llm`` cannot stream.

    Raises :class:`BackendError` when the backend reports a failed request.
    """
    outcome = outcome if outcome is not None else StreamOutcome()
    if supports_streaming(llm):
        outcome.streamed = True
        parts: list[str] = []
        assert isinstance(llm, StreamingLLM)
        for delta in llm.stream(request):
            if delta:
                parts.append(delta)
                yield delta
        outcome.text = "".join(parts)
        outcome.completion_tokens = int(llm.count_tokens(outcome.text))
        # A stream reports no usage: the prompt is counted here, with the serving model's tokenizer (the chat
        # template's few role tokens are not seen).
        outcome.prompt_tokens = sum(int(llm.count_tokens(m["content"])) for m in request.messages)
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
