"""Evidence verifier (paper Algorithm 4): does the logic-form evidence support answering the question?

* ``mode="pre"`` (checking arguments, the paper's better variant): question + evidence, before generation;
* ``mode="post"`` (checking results): question + evidence + the generated answer.

The reply is constrained to ``choices=("yes", "no")`` where the backend supports it and read tolerantly
otherwise: case-insensitive yes/no in English, 是/否/有/没有/… in Chinese, at the start of the reply or as
the verdict on its last line. Anything else (maybe, empty, an error) counts as NO, so an unsure verifier
sends the query to the dual-level fallback. The reference matched only an upper-case ``'YES' in reply``
(its English prompt asked for lower case, so English always failed) and produced no answer at all on NO.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Literal

from hxd2_ray.chunking.splitter import detect_language
from hxd2_ray.llm.base import LLMClient, LLMRequest
from hxd2_ray.logic.planner import LogicPromptSet, fill, load_logic_prompts

__all__ = ["EvidenceVerifier", "Verdict", "parse_verdict"]

CHOICES = ("yes", "no")

_YES_WORDS = ("yes", "y", "true", "supported", "support", "correct", "sufficient")
_NO_WORDS = ("no", "n", "false", "unsupported", "not", "insufficient", "incorrect")
_ZH_NO = ("没有", "不是", "不能", "不足", "不支持", "不可以", "否", "不", "无")
_ZH_YES = ("是", "有", "能", "可以", "支持", "足够", "对")
_LEAD_STRIP = " \t\r\n\"'`*_#>-:：.。!！,，()（）[]【】「」“”"
_WORD_RE = re.compile(r"[a-z]+")
_VERDICT_LINE_RE = re.compile(
    r"(?:answer|verdict|final|judg(?:e)?ment|decision|结论|判断|答案|回答)\s*[:：是为]?\s*(?P<v>[a-z]+|[\u4e00-\u9fff]{1,3})",
)


def _first_token_verdict(text: str) -> bool | None:
    s = text.strip(_LEAD_STRIP)
    if not s:
        return None
    m = _WORD_RE.match(s)
    if m:
        word = m.group(0)
        if word in _YES_WORDS:
            return True
        if word in _NO_WORDS:
            return False
        return None
    for w in _ZH_NO:  # negatives first: 没有 starts like 有 only after 没
        if s.startswith(w):
            return False
    for w in _ZH_YES:
        if s.startswith(w):
            return True
    return None


def parse_verdict(text: str | None) -> bool | None:
    """True for yes, False for no, None when the reply is neither (callers treat None as NO).

    Looks at the first word of the reply ("Yes, because…", "**NO**", "是。"), then at the last non-empty
    line ("… Therefore: YES"), then at an explicit "answer/verdict/结论: …" marker anywhere.
    """
    if not text:
        return None
    norm = unicodedata.normalize("NFKC", text).casefold()
    verdict = _first_token_verdict(norm)
    if verdict is not None:
        return verdict
    lines = [ln for ln in norm.splitlines() if ln.strip(_LEAD_STRIP)]
    if lines:
        verdict = _first_token_verdict(lines[-1])
        if verdict is not None:
            return verdict
        words = _WORD_RE.findall(lines[-1])
        if words and words[-1] in ("yes", "no"):
            return words[-1] == "yes"
    markers = list(_VERDICT_LINE_RE.finditer(norm))
    if markers:
        return _first_token_verdict(markers[-1].group("v"))
    return None


@dataclass(frozen=True, slots=True)
class Verdict:
    supported: bool
    raw: str  # the LLM's reply, verbatim
    reason: str  # "yes", "no", "unclear reply", or the LLM error
    mode: str = "pre"
    prompt_tokens: int = 0
    completion_tokens: int = 0


class EvidenceVerifier:
    def __init__(
        self,
        llm: LLMClient,
        mode: Literal["pre", "post"] = "pre",
        *,
        prompts: LogicPromptSet | None = None,
        constrained: bool = True,
        max_tokens: int = 16,
        max_evidence_chars: int = 24_000,
    ):
        if mode not in ("pre", "post"):
            raise ValueError(f"mode must be 'pre' or 'post', got {mode!r}")
        self.llm = llm
        self.mode = mode
        self.prompts = prompts or load_logic_prompts()
        self.constrained = constrained
        self.max_tokens = max_tokens
        self.max_evidence_chars = max_evidence_chars

    def request(
        self, question: str, evidence: Any, answer: str | None = None, language: str | None = None
    ) -> LLMRequest:
        if self.mode == "post" and answer is None:
            raise ValueError("a post-check needs the answer")
        text = evidence.format() if hasattr(evidence, "format") and not isinstance(evidence, str) else str(evidence)
        if len(text) > self.max_evidence_chars:
            text = text[: self.max_evidence_chars] + "\n…"
        lang = language if language and language != "auto" else detect_language(question)
        lp = self.prompts.for_language(lang)
        if self.mode == "pre":
            system, user = lp.verify_pre_system, fill(lp.verify_pre_user, evidence=text, question=question)
        else:
            system = lp.verify_post_system
            user = fill(lp.verify_post_user, evidence=text, answer=answer or "", question=question)
        return LLMRequest(
            messages=({"role": "system", "content": system}, {"role": "user", "content": user}),
            max_tokens=self.max_tokens,
            temperature=0.0,
            choices=CHOICES if self.constrained else None,
            tag=f"logic_verify_{self.mode}",
        )

    def verify(
        self, question: str, evidence: Any, answer: str | None = None, *, language: str | None = None
    ) -> Verdict:
        """One LLM call; ``evidence`` is text or a LogicFormEvidence (rendered with ``format()``)."""
        resp = self.llm.complete([self.request(question, evidence, answer, language)])[0]
        if resp.error:
            return Verdict(
                False, resp.text, f"LLM error: {resp.error}", self.mode, resp.prompt_tokens, resp.completion_tokens
            )
        verdict = parse_verdict(resp.text)
        reason = "unclear reply" if verdict is None else ("yes" if verdict else "no")
        return Verdict(bool(verdict), resp.text, reason, self.mode, resp.prompt_tokens, resp.completion_tokens)
