"""vLLM's async engine (``AsyncLLM``) for serving: continuous batching across concurrent requests, token streaming,
and abort when the consumer goes away.

:class:`~hxd2_ray.llm.vllm_engine.VllmEngineLLM` drives the offline ``vllm.LLM`` (one blocking ``chat`` call per
batch): right for the index job, wrong for a server, where requests arrive one by one from many callers and a
reply should stream. Here every request is its own ``engine.generate(...)`` coroutine, vLLM's scheduler batches
whatever is in flight at each step, and each coroutine sees only its own outputs.

* ``await complete(requests)``: the :class:`~hxd2_ray.llm.base.LLMClient` contract, async: one response per
  request, in order; a failing request sets ``error`` instead of sinking the batch.
* ``async for delta in stream(request)``: text deltas (``RequestOutputKind.DELTA``). When the consumer stops early
  (``aclose()``, task cancellation, a client that hung up upstream) the request is aborted in the engine, so its
  KV cache and scheduler slot are freed at once; :meth:`abort` does the same by request id.

Process model: ``AsyncLLM`` always runs the engine core in a child process (vLLM 0.32 has no in-process async
client; ``VLLM_ENABLE_V1_MULTIPROCESSING`` only applies to the offline ``LLM``). Inside a Ray actor vLLM switches
to the ``spawn`` start method itself. The chat template is applied here with the model's tokenizer and the token
ids handed to the engine (``TokensPrompt``), so prompt accounting and context fitting use the same ids vLLM sees.

vLLM is imported inside the class: importing this module stays cheap.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Sequence

from hxd2_ray.config import VllmLLMConfig, llm_model_id
from hxd2_ray.llm.base import LLMRequest, LLMResponse
from hxd2_ray.llm.vllm_setup import (
    caller_ld_preload,
    engine_kwargs,
    engine_start_scan_safe,
    prepare_process,
    resolve_model_path,
    sampling_params,
    structured_outputs_kwargs,
)

log = logging.getLogger(__name__)

# Tokens kept free besides prompt + completion (the same margin as the offline wrapper).
_SAFETY_TOKENS = 8
# A prompt that does not fit keeps this share of its budget from its head (system prompt, context) and the rest
# from its tail (the question and the assistant turn opener that the template appends).
_HEAD_SHARE = 0.75


@dataclass
class EngineStats:
    """Counters of one engine (what ``LLMServer.stats`` reports)."""

    started: int = 0
    finished: int = 0
    aborted: int = 0  # stopped before the model finished: consumer gone, deadline, abort()
    failed: int = 0
    truncated_prompts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_ms: list[float] = field(default_factory=list)  # time to first token of recent requests (last 256)

    def to_dict(self) -> dict[str, Any]:
        ttft = sorted(self.ttft_ms)
        return {
            "started": self.started,
            "finished": self.finished,
            "aborted": self.aborted,
            "failed": self.failed,
            "truncated_prompts": self.truncated_prompts,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "ttft_ms_p50": ttft[len(ttft) // 2] if ttft else None,
        }


class AsyncVllmEngine:
    """``AsyncLLM`` behind an async version of the LLMClient contract, plus streaming and abort."""

    supports_json_schema = True

    def __init__(self, cfg: VllmLLMConfig, *, compact_json: bool = True) -> None:
        self.cfg = cfg
        self.compact_json = compact_json
        self.model_id = llm_model_id(cfg)
        self.model_path = resolve_model_path(cfg.model)
        self.stats = EngineStats()
        self._live: set[str] = set()  # request ids in the engine right now
        self._render = True  # use the engine's renderer for token prompts (raw prompts are deprecated in vLLM)
        self.engine: Any = self._build_engine()
        self._tokenizer = self.engine.get_tokenizer()
        self.max_model_len = int(self.engine.model_config.max_model_len)

    # ------------------------------------------------------------------ engine

    def _build_engine(self) -> Any:
        prepare_process(self.cfg)
        from vllm.config import StructuredOutputsConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            **engine_kwargs(self.cfg, self.model_path, self.model_id),
            structured_outputs_config=StructuredOutputsConfig(**structured_outputs_kwargs(self.compact_json)),
            disable_log_stats=True,
        )
        with caller_ld_preload(), engine_start_scan_safe():
            return AsyncLLM.from_engine_args(args)

    def close(self) -> None:
        engine, self.engine = getattr(self, "engine", None), None
        if engine is not None:
            try:
                engine.shutdown()
            except Exception:
                log.warning("engine shutdown failed", exc_info=True)

    async def check_health(self) -> None:
        if self.engine is None:
            raise RuntimeError("AsyncVllmEngine is closed")
        await self.engine.check_health()

    def num_unfinished(self) -> int:
        return int(self.engine.get_num_unfinished_requests()) if self.engine is not None else 0

    def snapshot(self) -> dict[str, Any]:
        """Counters for the deployment's ``stats`` call."""
        return {
            **self.stats.to_dict(),
            "backend": "vllm",
            "model_id": self.model_id,
            "unfinished": self.num_unfinished(),
            "max_model_len": self.max_model_len,
        }

    # ---------------------------------------------------------------- tokens

    def count_tokens(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False))

    def prompt_ids(self, messages: Sequence[Any]) -> list[int]:
        msgs = [{"role": m["role"], "content": m["content"]} for m in messages]
        rendered = self._tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return list(self._tokenizer.encode(rendered, add_special_tokens=False))

    def _fit(self, ids: list[int], max_tokens: int) -> tuple[list[int], int, bool]:
        """Fit prompt + completion into max_model_len: lower max_tokens to what is left (at least a quarter of
        what was asked), then cut the middle of the prompt. The query pipeline budgets its prompts, so this is
        only a safety net for callers that do not (a client's over-long chat message)."""
        limit = self.max_model_len - _SAFETY_TOKENS
        want = max(1, max_tokens)
        if len(ids) + want <= limit:
            return ids, want, False
        floor = max(1, min(want, max(16, want // 4)))
        if len(ids) + floor <= limit:
            return ids, limit - len(ids), False
        room = max(2, limit - floor)
        head = int(room * _HEAD_SHARE)
        tail = room - head
        return ids[:head] + ids[len(ids) - tail :], floor, True

    def _prepare(self, req: LLMRequest, delta: bool) -> tuple[dict[str, Any], Any]:
        ids, max_tokens, truncated = self._fit(self.prompt_ids(req.messages), req.max_tokens)
        if truncated:
            self.stats.truncated_prompts += 1
            log.warning("prompt cut to %d tokens to fit max_model_len %d", len(ids), self.max_model_len)
        from vllm.sampling_params import RequestOutputKind

        kind = RequestOutputKind.DELTA if delta else RequestOutputKind.FINAL_ONLY
        return {"prompt_token_ids": ids}, sampling_params(req, max_tokens, output_kind=kind)

    # ------------------------------------------------------------ generation

    async def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        """One response per request, in order; the engine batches them with everything else in flight."""
        if self.engine is None:
            raise RuntimeError("AsyncVllmEngine is closed")
        return list(await asyncio.gather(*(self._complete_one(r) for r in requests)))

    async def _complete_one(self, req: LLMRequest) -> LLMResponse:
        try:
            prompt, params = self._prepare(req, delta=False)
        except Exception as exc:  # noqa: BLE001 - e.g. a chat template that rejects this message list
            self.stats.failed += 1
            return LLMResponse("", finish_reason="error", error=f"prompt preparation failed: {exc}"[:2000])
        final = None
        try:
            async for out in self._generate(prompt, params, _request_id(req)):
                final = out
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as exc:  # noqa: BLE001 - one failing request must not sink the others
            return LLMResponse(
                "", len(prompt["prompt_token_ids"]), 0, "error", error=f"{type(exc).__name__}: {exc}"[:2000]
            )
        if final is None:
            return LLMResponse("", len(prompt["prompt_token_ids"]), 0, "error", error="the engine returned nothing")
        comp = final.outputs[0]
        return LLMResponse(
            text=comp.text,
            prompt_tokens=len(final.prompt_token_ids or prompt["prompt_token_ids"]),
            completion_tokens=len(comp.token_ids),
            finish_reason=comp.finish_reason or "stop",
            cached_tokens=int(getattr(final, "num_cached_tokens", 0) or 0),  # vLLM's prefix-cache hits
        )

    async def stream(self, request: LLMRequest, request_id: str | None = None) -> AsyncIterator[str]:
        """Text deltas of the reply; raises on failure. Stopping early aborts the request in the engine."""
        if self.engine is None:
            raise RuntimeError("AsyncVllmEngine is closed")
        prompt, params = self._prepare(request, delta=True)
        async for out in self._generate(prompt, params, request_id or _request_id(request)):
            text = out.outputs[0].text if out.outputs else ""
            if text:
                yield text

    async def _engine_input(self, prompt: dict[str, Any]) -> Any:
        """The token prompt rendered by the engine's renderer (vLLM 0.32 deprecates raw prompts in generate());
        the raw ``TokensPrompt`` when this vLLM has no such renderer."""
        render = getattr(getattr(self.engine, "renderer", None), "render_cmpl_async", None)
        if not self._render or render is None:
            return prompt
        try:
            (engine_input,) = await render([prompt])
            return engine_input
        except Exception as exc:  # noqa: BLE001 - an API change: fall back to the raw prompt, once and for all
            log.warning("rendering through the engine failed (%s); passing raw token prompts", exc)
            self._render = False
            return prompt

    async def _generate(self, prompt: dict[str, Any], params: Any, request_id: str) -> AsyncIterator[Any]:
        stats = self.stats
        stats.started += 1
        started = time.perf_counter()
        delta = params.output_kind.name == "DELTA"
        first = delta  # time to first token only means something for a streamed request
        finished = False
        completion = 0
        self._live.add(request_id)
        try:
            engine_input = await self._engine_input(prompt)
            async for out in self.engine.generate(engine_input, params, request_id):
                if first and out.outputs and out.outputs[0].token_ids:
                    first = False
                    stats.ttft_ms.append((time.perf_counter() - started) * 1000)
                    del stats.ttft_ms[:-256]
                if out.outputs:
                    # DELTA outputs carry only the new tokens; FINAL_ONLY carries them all once.
                    completion += len(out.outputs[0].token_ids)
                if out.finished:
                    finished = True
                    stats.prompt_tokens += len(out.prompt_token_ids or prompt["prompt_token_ids"])
                    stats.completion_tokens += completion
                yield out
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except Exception:
            stats.failed += 1
            raise
        finally:
            self._live.discard(request_id)
            if finished:
                stats.finished += 1
            else:
                # The consumer stopped early (or the request failed): make sure the engine drops it. vLLM's own
                # generate() aborts on cancellation too; aborting a finished or unknown id is a no-op.
                stats.aborted += 1
                await self._abort_quietly(request_id)

    async def abort(self, request_id: str) -> None:
        """Abort a request by the id given to :meth:`stream` (its generator then ends)."""
        await self._abort_quietly(request_id)

    async def _abort_quietly(self, request_id: str) -> None:
        if self.engine is None:
            return
        try:
            await asyncio.shield(self.engine.abort(request_id))
        except (asyncio.CancelledError, Exception):
            # The request ends either way; an engine that cannot abort keeps generating for nobody, worth a line.
            log.warning("abort of %s failed", request_id, exc_info=True)


def _request_id(req: LLMRequest) -> str:
    return f"{req.tag or 'req'}-{uuid.uuid4().hex[:16]}"
