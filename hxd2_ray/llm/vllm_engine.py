"""In-process vLLM engine behind the :class:`~hxd2_ray.llm.base.LLMClient` protocol.

One ``complete`` call hands the whole batch to a single ``LLM.chat`` call, so vLLM's continuous batching
schedules every request together. vLLM and torch are imported inside the class: importing this module
must stay cheap (the driver, the CLI and the unit tests import it without an engine).

Multiprocessing: by default the engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
set with ``setdefault`` so the caller can still choose otherwise). On the CPU build that avoids the two
extra spawned processes (EngineCore + worker) that the "mp" executor needs, starts faster, works the same
inside pytest and inside Ray actors, and lets ``close()`` free everything without orphan processes.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Sequence

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

# Marker put where the middle of an over-long user message was cut.
TRUNCATION_MARKER = "\n[...]\n"
# Tokens kept free besides prompt + completion: chat-template rendering and vLLM's own tokenization may
# disagree by a token or two (special tokens, merges across the cut), and a rejected prompt fails the batch.
_SAFETY_TOKENS = 8
# When a prompt is too long we first lower max_tokens, but never below this share of what was asked
# (at least 64 tokens): a JSON answer cut by the length limit is worth nothing, so past that point the
# input is shortened instead.
_MIN_COMPLETION_SHARE = 0.5
_MIN_COMPLETION_TOKENS = 64


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A request after fitting it into the context window."""

    messages: list[dict[str, str]]
    max_tokens: int
    truncated: bool = False
    error: str = ""


class VllmEngineLLM:
    """:class:`LLMClient` backed by an in-process ``vllm.LLM`` (CPU or one GPU / tensor-parallel group)."""

    supports_json_schema = True
    thread_safe = False  # one blocking batch at a time: callers serialize (ThreadedVllmLLM is the concurrent one)

    def __init__(self, cfg: VllmLLMConfig, *, compact_json: bool = True) -> None:
        self.cfg = cfg
        self.compact_json = compact_json
        self.model_id = llm_model_id(cfg)
        self.model_path = resolve_model_path(cfg.model)
        self.truncated_prompts = 0  # how many prompts had to be shortened (reported by the NER stage)
        self._llm: Any = self._build_engine()
        self._tokenizer = self._llm.get_tokenizer()
        # The engine may lower max_model_len (e.g. to the model's own limit); budget against what it uses.
        self.max_model_len = int(self._llm.model_config.max_model_len)

    # ------------------------------------------------------------------ engine

    def _build_engine(self) -> Any:
        prepare_process(self.cfg)
        # In-process engine core; see the module docstring. vLLM caches its env vars once the first
        # engine core starts, so this must be set before the first engine in the process.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        import torch

        # With the engine core in-process, vLLM's CPU worker lowers torch's thread count in this process and
        # replaces torch.set_num_threads with a no-op; both are put back in close() so torch code that runs
        # here afterwards (other tests, an embedder) is not left on one thread.
        self._torch_threads = (torch.set_num_threads, torch.get_num_threads())
        from vllm import LLM

        try:
            with caller_ld_preload(), engine_start_scan_safe():
                return LLM(
                    **engine_kwargs(self.cfg, self.model_path, self.model_id),
                    structured_outputs_config=structured_outputs_kwargs(self.compact_json) or None,
                )
        except BaseException:
            self._restore_torch_threads()
            raise

    def close(self) -> None:
        """Shut the engine down and free its memory so another engine can start in this process."""
        llm, self._llm = getattr(self, "_llm", None), None
        self._tokenizer = None
        if llm is None:
            return
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:
            log.warning("engine core shutdown failed", exc_info=True)
        del llm
        gc.collect()
        try:
            # The in-process worker initialised torch.distributed (gloo, world size 1) and vLLM's
            # parallel groups; a second engine in the same process needs them torn down first.
            from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

            destroy_model_parallel()
            destroy_distributed_environment()
        except Exception:
            log.warning("distributed teardown failed (a second engine in this process may not start)", exc_info=True)
        gc.collect()
        self._restore_torch_threads()
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _restore_torch_threads(self) -> None:
        import torch

        set_num_threads, num_threads = self._torch_threads
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(num_threads)

    def __enter__(self) -> "VllmEngineLLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def llm(self) -> Any:
        if self._llm is None:
            raise RuntimeError("VllmEngineLLM is closed")
        return self._llm

    # ---------------------------------------------------------------- tokens

    def count_tokens(self, text: str) -> int:
        if self._tokenizer is None:
            raise RuntimeError("VllmEngineLLM is closed")
        return len(self._tokenizer.encode(text, add_special_tokens=False))

    def prompt_tokens(self, messages: Sequence[dict[str, str]]) -> int:
        """Tokens of the chat-templated prompt, as vLLM's chat path will tokenize it."""
        rendered = self._tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return len(self._tokenizer.encode(rendered, add_special_tokens=False))

    # ------------------------------------------------------------ completion

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        llm = self.llm  # raises when closed: a programming error, not a per-request failure
        if not requests:
            return []
        prepared = [self._prepare(r) for r in requests]
        live = [i for i, p in enumerate(prepared) if not p.error]
        responses: list[LLMResponse | None] = [None] * len(requests)
        for i, p in enumerate(prepared):
            if p.error:
                responses[i] = LLMResponse(text="", finish_reason="error", error=p.error)
        if live:
            convs = [prepared[i].messages for i in live]
            params = [sampling_params(requests[i], prepared[i].max_tokens) for i in live]
            try:
                outs = llm.chat(convs, params, use_tqdm=False)
                if len(outs) != len(live):
                    # Leftovers of an earlier failed call would come back with this one and shift the order.
                    raise RuntimeError(f"vLLM returned {len(outs)} outputs for {len(live)} requests")
                for i, out in zip(live, outs):
                    responses[i] = _to_response(out)
            except Exception as exc:  # noqa: BLE001 - one bad request must not sink the batch
                log.warning("batch of %d failed (%s: %s); retrying one by one", len(live), type(exc).__name__, exc)
                self._drain()
                for i, conv, sp in zip(live, convs, params):
                    responses[i] = self._complete_one(conv, sp)
        return [r for r in responses if r is not None]

    def _complete_one(self, conv: list[dict[str, str]], sp: Any) -> LLMResponse:
        try:
            outs = self.llm.chat([conv], [sp], use_tqdm=False)
            if len(outs) != 1:
                raise RuntimeError(f"vLLM returned {len(outs)} outputs for 1 request")
            return _to_response(outs[0])
        except Exception as exc:  # noqa: BLE001
            self._drain()
            return LLMResponse(text="", finish_reason="error", error=f"{type(exc).__name__}: {exc}"[:2000])

    def _drain(self) -> None:
        """Finish whatever a failed call left in the engine, so the next call's outputs are only its own."""
        engine = self.llm.llm_engine
        try:
            for _ in range(100_000):
                if not engine.has_unfinished_requests():
                    break
                engine.step()
        except Exception:
            log.warning("draining the engine failed: the next call may see this call's outputs", exc_info=True)

    # ---------------------------------------------------------- truncation

    def _prepare(self, req: LLMRequest) -> _Prepared:
        """Fit one request into max_model_len: lower max_tokens a little, else cut the last user message."""
        messages = [{"role": m["role"], "content": m["content"]} for m in req.messages]
        limit = self.max_model_len - _SAFETY_TOKENS
        want = max(1, req.max_tokens)
        floor = min(want, max(_MIN_COMPLETION_TOKENS, int(want * _MIN_COMPLETION_SHARE)))
        try:
            n = self.prompt_tokens(messages)
            if n + want <= limit:
                return _Prepared(messages, want)
            if n + floor <= limit:
                return _Prepared(messages, limit - n)
            user_idx = next((i for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] == "user"), None)
            if user_idx is None:
                return _Prepared(messages, want, error=f"prompt of {n} tokens does not fit max_model_len {limit}")
            # Tokens of the prompt without the last user message's text: the part we cannot shorten.
            fixed = self.prompt_tokens(_with_content(messages, user_idx, "")) + self.count_tokens(TRUNCATION_MARKER)
            if fixed + 1 > limit:
                return _Prepared(messages, want, error=f"prompt without its text is {fixed} tokens, over {limit}")
            max_tokens = max(1, min(floor, limit - fixed - 32))
            messages = self._shorten(messages, user_idx, limit - max_tokens)
            n = self.prompt_tokens(messages)
            if n + max_tokens > limit:
                return _Prepared(messages, want, error=f"could not shorten prompt to fit ({n}+{max_tokens}>{limit})")
        except Exception as exc:  # noqa: BLE001 - e.g. a chat template that rejects this message list
            return _Prepared(messages, want, error=f"prompt preparation failed: {type(exc).__name__}: {exc}")
        self.truncated_prompts += 1
        log.warning("prompt shortened to %d tokens (max_tokens %d -> %d)", n, want, max_tokens)
        return _Prepared(messages, min(want, limit - n), truncated=True)

    def _shorten(self, messages: list[dict[str, str]], idx: int, target: int) -> list[dict[str, str]]:
        """Cut the middle of messages[idx] until the whole prompt has at most ``target`` tokens.

        The head (instructions, the start of the text) keeps most of the budget and the tail keeps a
        little, because extraction prompts often end with the output-format reminder.
        """
        ids = self._tokenizer.encode(messages[idx]["content"], add_special_tokens=False)
        keep = len(ids)
        for _ in range(6):
            over = self.prompt_tokens(messages) - target
            if over <= 0:
                break
            keep = max(0, keep - over - self.count_tokens(TRUNCATION_MARKER) - 4)
            tail = min(keep // 4, 200)
            head = keep - tail
            text = (
                self._tokenizer.decode(ids[:head])
                + TRUNCATION_MARKER
                + (self._tokenizer.decode(ids[len(ids) - tail :]) if tail else "")
            )
            messages = _with_content(messages, idx, text)
        return messages

    # ------------------------------------------------------------ benchmark

    def generate_raw(
        self, prompts: Sequence[str], max_tokens: int, json_schema: dict[str, Any] | None = None
    ) -> tuple[list[str], int, float]:
        """One bare ``llm.chat`` pass (one user message per prompt, greedy) for the NER-efficiency benchmark.

        No truncation, fallback or accounting: the reference against which the pipeline's tokens/s on the
        same prompts is compared. Returns (texts, total generated tokens, wall seconds).
        """
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        structured = StructuredOutputsParams(json=json_schema) if json_schema is not None else None
        sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, structured_outputs=structured)
        convs = [[{"role": "user", "content": p}] for p in prompts]
        t0 = time.perf_counter()
        outs = self.llm.chat(convs, sp, use_tqdm=False)
        seconds = time.perf_counter() - t0
        texts = [o.outputs[0].text for o in outs]
        generated = sum(len(o.outputs[0].token_ids) for o in outs)
        return texts, generated, seconds


def _with_content(messages: list[dict[str, str]], idx: int, content: str) -> list[dict[str, str]]:
    out = [dict(m) for m in messages]
    out[idx]["content"] = content
    return out


def _to_response(out: Any) -> LLMResponse:
    comp = out.outputs[0]
    return LLMResponse(
        text=comp.text,
        prompt_tokens=len(out.prompt_token_ids or ()),
        completion_tokens=len(comp.token_ids),
        finish_reason=comp.finish_reason or "stop",
        cached_tokens=int(getattr(out, "num_cached_tokens", 0) or 0),  # vLLM's prefix-cache hits for this prompt
    )
