"""The LLM seam: :class:`LLMClient` and its backends (scripted fake, vLLM in process, a server speaking the OpenAI
protocol).

Where things are: :mod:`base` holds the protocols (:class:`LLMClient`, ``StreamingLLM``, ``AsyncLLMEngine``) and
the request and response records. Backends: :mod:`scripted` (the deterministic fake) and :mod:`scripted_async` (the
same with the async engine's surface); :mod:`vllm_engine` (the offline ``vllm.LLM``, one batch per call),
:mod:`vllm_async` (vLLM's ``AsyncLLM`` for serving: batching across requests, streaming, abort), :mod:`threaded` (a
thread-safe synchronous client over the async engine) and :mod:`vllm_setup` (what both vLLM engines set up alike);
:mod:`openai_backend` (a model behind an OpenAI-protocol server, through the official SDK). Around a client:
:mod:`wrappers` (one call at a time with cancellation, an error tally), :mod:`metering` (the calls and tokens the
backend was actually asked, below any cache), :mod:`cache` (responses stored with the index, shared by the indexing
job's actors) and :mod:`streaming` (one call streamed when the backend can, whole when it cannot); :mod:`tokens`
counts tokens with the serving model's tokenizer. vLLM and torch are imported by the ``vllm_*`` modules alone,
transformers by :mod:`tokens`, openai by :mod:`openai_backend`; :mod:`hxd2_ray.wiring` loads a backend only when the
config picks it. No Ray here.
"""

from hxd2_ray.llm.base import LLMClient, LLMRequest, LLMResponse, Message

__all__ = ["LLMClient", "LLMRequest", "LLMResponse", "Message"]
