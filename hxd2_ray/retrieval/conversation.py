"""A conversation's last question, rewritten to stand alone before retrieval.

After "Tell me about Qinghe 17", a chat client sends "Who bred it?" with the earlier turns: retrieval on "Who bred
it?" finds nothing about Qinghe 17. When a request carries earlier messages, the LLM reads the latest of them
(``multistage.history_turns`` messages, at most ``history_max_chars`` characters, the newest kept) and rewrites the
question ("Who bred Qinghe 17?"); everything after (intent, the refusal gate, retrieval, planning, the answer) uses
the rewrite. A reply that is empty, far longer than the question, not one line, a copy of a turn of the
conversation, or no longer a question when the question was one (a 135M model answers "David Eagleman is a
neuroscientist at Stanford University." for "Which company did he co-found?") is not taken: the question is then
followed by the latest user turn (``Which company did he co-found? (Tell me about David Eagleman.)``), which gives
retrieval what the question refers to, and the trace says why. The trace shows the rewrite and the turns it read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from hxd2_ray.config import MultiStageConfig
from hxd2_ray.errors import BackendError
from hxd2_ray.llm.base import LLMClient, LLMRequest
from hxd2_ray.llm.streaming import complete_one
from hxd2_ray.retrieval.intent import MultiStageLanguagePrompts, fill

ROLES = ("user", "assistant")
# A rewrite longer than this many times the question (and 200 characters) is a model rambling, not a rewrite.
_MAX_GROWTH = 4


@dataclass(frozen=True, slots=True)
class Rewrite:
    """The question retrieval uses, and how it came about (JSON-ready through :meth:`to_dict`)."""

    question: str
    original: str
    turns: int = 0  # earlier messages read
    rewritten: bool = False
    note: str = ""  # why the original was kept
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "original": self.original,
            "rewritten": self.question if self.rewritten else None,
            "history_turns": self.turns,
            **({"note": self.note} if self.note else {}),
        }


def recent_turns(history: Sequence[Mapping[str, Any]], max_turns: int, max_chars: int) -> list[tuple[str, str]]:
    """The latest user and assistant messages of ``history`` (role, text), oldest first, within both bounds."""
    picked: list[tuple[str, str]] = []
    used = 0
    for message in reversed(list(history)):
        role, text = str(message.get("role", "")), str(message.get("content") or "").strip()
        if role not in ROLES or not text:
            continue
        if len(picked) >= max_turns or used + len(text) > max_chars:
            if not picked:  # the newest message alone is over the bound: its latest characters
                picked.append((role, text[-max_chars:]))
            break
        picked.append((role, text))
        used += len(text)
    return picked[::-1]


def render_history(turns: Sequence[tuple[str, str]]) -> str:
    return "\n".join(f"{'User' if role == 'user' else 'Assistant'}: {' '.join(text.split())}" for role, text in turns)


def standalone_question(
    llm: LLMClient | None,
    prompts: MultiStageLanguagePrompts,
    cfg: MultiStageConfig,
    question: str,
    history: Sequence[Mapping[str, Any]],
    temperature: float = 0.0,
) -> Rewrite:
    """``question`` rewritten to stand alone from the latest turns of ``history`` (see the module)."""
    turns = recent_turns(history, cfg.history_turns, cfg.history_max_chars) if cfg.history_turns > 0 else []
    if not turns:
        return Rewrite(question, question)
    if llm is None:
        return Rewrite(question, question, len(turns), note="no LLM to rewrite with")
    request = LLMRequest(
        messages=(
            {"role": "system", "content": prompts.rewrite_system},
            {"role": "user", "content": fill(prompts.rewrite_user, history=render_history(turns), question=question)},
        ),
        max_tokens=cfg.rewrite_max_tokens,
        temperature=temperature,
        tag="rewrite",
    )
    try:
        reply = complete_one(llm, request)
    except BackendError as exc:
        return Rewrite(question, question, len(turns), note=f"the rewrite call failed ({exc}); the question as asked")
    text = _clean(reply.text)
    tokens = (reply.prompt_tokens, reply.completion_tokens)
    problem = _not_a_rewrite(text, question, turns)
    if problem:
        said = [t for role, t in turns if role == "user"]
        if not said:
            return Rewrite(question, question, len(turns), False, f"{problem}; the question as asked", *tokens)
        with_turn = f"{question} ({' '.join(said[-1].split())[: cfg.history_max_chars]})"
        return Rewrite(with_turn, question, len(turns), True, f"{problem}; the latest user turn added", *tokens)
    return Rewrite(text, question, len(turns), text != question, "", *tokens)


def _not_a_rewrite(text: str, question: str, turns: Sequence[tuple[str, str]]) -> str:
    """Why ``text`` is not a rewrite of ``question`` ("" when it is one)."""
    if not text or "\n" in text or len(text) > max(200, _MAX_GROWTH * len(question)):
        return "the rewrite was empty or not one short line"
    folded = " ".join(text.split()).casefold()
    if any(folded == " ".join(t.split()).casefold() for _, t in turns):
        return "the rewrite repeated a turn of the conversation"
    if question.rstrip().endswith(("?", "？")) and not text.rstrip().endswith(("?", "？")):
        return "the rewrite is not a question"
    return ""


def record_rewrite(trace: Any, rewrite: Rewrite, seconds: float) -> None:
    """The rewrite in the query's trace: what was asked, what retrieval used, the turns read, its cost."""
    trace["conversation"] = rewrite.to_dict()
    trace["timings_ms"]["rewrite"] = round(seconds * 1000, 1)
    if rewrite.prompt_tokens or rewrite.completion_tokens:
        trace.tokens("rewrite", rewrite.prompt_tokens, rewrite.completion_tokens)


def _clean(reply: str) -> str:
    """The reply without the labels and quotes a small model wraps a question in."""
    text = reply.strip()
    for label in ("Rewritten question:", "Question:", "问题：", "问题:"):
        if text.startswith(label):
            text = text[len(label) :].strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'“”「」":
        text = text[1:-1].strip()
    return text
