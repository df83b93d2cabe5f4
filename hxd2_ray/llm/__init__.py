"""The LLM seam: :class:`LLMClient` and its backends (scripted fake, in-process vLLM)."""

from hxd2_ray.llm.base import LLMClient, LLMRequest, LLMResponse, Message

__all__ = ["LLMClient", "LLMRequest", "LLMResponse", "Message"]
