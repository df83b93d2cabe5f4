"""Token budgets (pure): cut an over-long question, fit ranked rows into per-section and total budgets.

Tokens are counted with the serving model's tokenizer (``LLMClient.count_tokens``), never an estimate
from another model's encoding (the reference used tiktoken's gpt-4o for every model). Rows are ranked best
first, so a budget always keeps a prefix: the lowest-ranked rows go first. The question and the
instructions are never cut to fit the tables; only an over-long question is cut, to its own budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

TokenCounter = Callable[[str], int]

# Chat templates add role markers and special tokens the plain text count does not see; small models'
# templates add under 20. Kept free on top of the answer reserve so a fitted prompt is never cut by the engine.
TEMPLATE_OVERHEAD_TOKENS = 32
DEFAULT_CONTEXT_LENGTH = 32768  # when neither the config nor the LLM says (the paper's 32k model)


@dataclass(frozen=True, slots=True)
class ContextLimits:
    context_length: int
    answer_reserve: int  # tokens left free for the answer
    answer_max_tokens: int
    input_cap: int  # most prompt tokens: context_length - answer_reserve - template overhead
    notice: str = ""  # set when the reserve had to be clamped


def context_limits(context_length: int, answer_reserve_tokens: int, answer_max_tokens: int) -> ContextLimits:
    """Split the context between prompt and answer.

    The paper's 32k model keeps 4096 for the answer (28k input). A small model (2048 context) cannot, so
    the reserve is clamped to half the context, and the answer cap never exceeds the reserve.
    """
    reserve = answer_reserve_tokens
    notice = ""
    if reserve > context_length // 2:
        reserve = max(1, context_length // 2)
        notice = (
            f"answer reserve clamped from {answer_reserve_tokens} to {reserve} tokens (context length {context_length})"
        )
    max_tokens = max(1, min(answer_max_tokens, reserve))
    cap = max(0, context_length - reserve - TEMPLATE_OVERHEAD_TOKENS)
    return ContextLimits(context_length, reserve, max_tokens, cap, notice)


def cut_to_tokens(text: str, budget: int, count: TokenCounter, marker: str = " [...] ") -> tuple[str, bool]:
    """``text`` if it fits ``budget`` tokens, else its head and tail around ``marker`` (most of it the head).

    The tail is kept because a pasted document usually ends with the actual ask. Binary search over the
    number of characters kept: O(log n) tokenizer calls, each on at most the kept text.
    """
    if count(text) <= budget:
        return text, False

    def shortened(keep: int) -> str:
        tail = keep // 4
        head = keep - tail
        return text[:head].rstrip() + marker + (text[len(text) - tail :].lstrip() if tail else "")

    lo, hi = 0, len(text) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(shortened(mid)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return shortened(lo), True


def fit_rows(row_tokens: Sequence[int], header_tokens: int, budget: int) -> int:
    """How many leading (best-ranked) rows fit ``budget`` together with the table header."""
    used = header_tokens
    kept = 0
    for tokens in row_tokens:
        if used + tokens > budget:
            break
        used += tokens
        kept += 1
    return kept


def table_tokens(row_tokens: Sequence[int], header_tokens: int, kept: int) -> int:
    """Tokens of a table holding its first ``kept`` rows (0 when it holds none: the empty marker is tiny)."""
    return header_tokens + sum(row_tokens[:kept]) if kept else 0


def fit_total(
    row_tokens: Mapping[str, Sequence[int]],
    header_tokens: Mapping[str, int],
    kept: Mapping[str, int],
    available: int,
) -> dict[str, int]:
    """Shrink the sections until together they fit ``available`` tokens.

    Each section's budget is scaled by the same factor (its share of what is used stays the same), then
    rows are dropped lowest-ranked first within each section; repeated because row sizes are lumpy.
    """
    result = dict(kept)
    available = max(0, available)
    while True:  # every round drops at least one row, and an empty context always fits
        used = {s: table_tokens(row_tokens[s], header_tokens[s], result[s]) for s in result}
        total = sum(used.values())
        if total <= available:
            return result
        factor = available / total
        shrunk = {s: fit_rows(row_tokens[s][: result[s]], header_tokens[s], int(used[s] * factor)) for s in result}
        if shrunk == result:
            # Rounding kept everything: drop the last row of the largest section.
            largest = max((s for s in result if result[s]), key=lambda s: used[s])
            shrunk[largest] -= 1
        result = shrunk
