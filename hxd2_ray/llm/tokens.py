"""Token counting with the serving model's own tokenizer, without starting an engine."""

from __future__ import annotations

from typing import Callable

from hxd2_ray.config import ScriptedLLMConfig, VllmLLMConfig
from hxd2_ray.models import resolve_llm_path

TokenCounter = Callable[[str], int]


def build_token_counter(cfg: ScriptedLLMConfig | VllmLLMConfig) -> TokenCounter:
    match cfg:
        case ScriptedLLMConfig():
            per_word = cfg.tokens_per_word
            return lambda text: int(len(text.split()) * per_word + 0.5)
        case VllmLLMConfig():
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(resolve_llm_path(cfg.model))
            return lambda text: len(tokenizer.encode(text, add_special_tokens=False))
    raise TypeError(f"no token counter for {type(cfg).__name__}")
