"""Token counting with the serving model's own tokenizer, without starting an engine."""

from __future__ import annotations

from typing import Callable

from hxd2_ray.config import OpenAILLMConfig, ScriptedLLMConfig, VllmLLMConfig
from hxd2_ray.models import resolve_llm_path

TokenCounter = Callable[[str], int]

# Without a tokenizer for a remote model, a token is taken as 3 characters: BPE vocabularies average about 4 on
# English text, so the estimate errs towards too many tokens, and a prompt budgeted with it still fits.
CHARS_PER_ESTIMATED_TOKEN = 3


def estimate_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_ESTIMATED_TOKEN - 1) // CHARS_PER_ESTIMATED_TOKEN


def _tokenizer_counter(folder: str) -> TokenCounter:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_llm_path(folder))
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


def build_token_counter(cfg: ScriptedLLMConfig | VllmLLMConfig | OpenAILLMConfig) -> TokenCounter:
    match cfg:
        case ScriptedLLMConfig():
            per_word = cfg.tokens_per_word
            return lambda text: int(len(text.split()) * per_word + 0.5)
        case VllmLLMConfig():
            return _tokenizer_counter(cfg.model)
        case OpenAILLMConfig():
            return estimate_tokens if cfg.tokenizer is None else _tokenizer_counter(cfg.tokenizer)
    raise TypeError(f"no token counter for {type(cfg).__name__}")
