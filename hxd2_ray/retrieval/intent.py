"""Intent recognition for the multi-stage pipeline, and the versioned prompts of that pipeline.

:class:`IntentClassifier` sorts a message into one of :data:`INTENTS`:

* ``question``: needs retrieval (the default: anything unreadable, any failure, lands here);
* ``greeting``: hello / thanks / goodbye;
* ``identity``: who or what the assistant is;
* ``off_topic``: chit-chat that needs no lookup.

A rule layer answers the obvious cases for free (exact greetings such as "hi", "你好", "谢谢" after folding
case, spaces and punctuation; short identity phrases such as "who are you", "你是谁"); everything else costs
one LLM call constrained with ``choices=INTENTS`` where the backend supports it and read tolerantly
otherwise. An unreadable reply or a failed call gives ``question``: the gate fails open to retrieval, since
LLM gates on small models are fragile (the reference's gate blocked on labels its own prompt never offered,
so it never fired; see the reference notes 2.2).

The prompts of the whole multi-stage pipeline live in ``prompts/multistage_<version>.yaml`` and are loaded
here (:func:`load_multistage_prompts`), the lowest module of the three that use them.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from hxd2_ray.chunking.splitter import detect_language
from hxd2_ray.llm.base import LLMClient, LLMRequest
from hxd2_ray.prompt_templates import (
    PromptSet,
    PromptSetLoader,
    check_placeholders,
    placeholder_filler,
    section_text,
    section_value,
)

__all__ = [
    "INTENTS",
    "Intent",
    "IntentClassifier",
    "MultiStageLanguagePrompts",
    "MultiStagePromptSet",
    "fill",
    "load_multistage_prompts",
    "load_multistage_prompts_file",
    "parse_intent",
    "parse_multistage_prompts",
    "rule_intent",
]

INTENTS = ("question", "greeting", "identity", "off_topic")

# ------------------------------------------------------------------------------------------- prompts


PLACEHOLDERS = ("question", "evidence", "reason", "kb", "history")


fill = placeholder_filler(PLACEHOLDERS)


@dataclass(frozen=True, slots=True)
class MultiStageLanguagePrompts:
    kb_hint: str  # {kb}
    intent_system: str  # {kb}
    intent_user: str  # ends with {question}
    intent_labels: Mapping[str, tuple[str, ...]]  # intent -> words a model may use for it
    direct_system: str  # {kb}
    direct_user: str  # ends with {question}
    refusal: str
    logic_answer_system: str
    logic_answer_user: str  # {evidence}, ends with {question}
    logic_failed: str  # {reason}
    graph_walk_failed: str  # {reason}
    empty_answer: str
    greeting_reply: str
    rewrite_system: str  # a conversation's last question rewritten to stand alone
    rewrite_user: str  # {history}, ends with {question}

    def kb_line(self, description: str) -> str:
        return fill(self.kb_hint, kb=description.strip()) if description and description.strip() else ""


MultiStagePromptSet = PromptSet[MultiStageLanguagePrompts]


def _language(lang: str, section: Any) -> MultiStageLanguagePrompts:
    def get(*path: str) -> Any:
        return section_value("multi-stage", lang, section, path)

    def text(*path: str) -> str:
        return section_text("multi-stage", lang, section, path)

    raw_labels = get("intent", "labels")
    if not isinstance(raw_labels, dict) or set(raw_labels) != set(INTENTS):
        raise ValueError(f"multi-stage prompt file: {lang}.intent.labels must list exactly {', '.join(INTENTS)}")
    labels = {}
    for intent in INTENTS:
        words = raw_labels[intent]
        if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
            raise ValueError(f"multi-stage prompt file: {lang}.intent.labels.{intent} must be a list of words")
        labels[intent] = tuple(_fold(w) for w in words)
    prompts = MultiStageLanguagePrompts(
        kb_hint=text("kb_hint"),
        intent_system=text("intent", "system"),
        intent_user=text("intent", "user"),
        intent_labels=MappingProxyType(labels),
        direct_system=text("direct", "system"),
        direct_user=text("direct", "user"),
        refusal=text("refusal"),
        logic_answer_system=text("logic_answer", "system"),
        logic_answer_user=text("logic_answer", "user"),
        logic_failed=text("logic_failed"),
        graph_walk_failed=text("graph_walk_failed"),
        empty_answer=text("empty_answer"),
        greeting_reply=text("greeting_reply"),
        rewrite_system=text("rewrite", "system"),
        rewrite_user=text("rewrite", "user"),
    )
    check_placeholders(
        "multi-stage",
        lang,
        prompts,
        ends_with=[
            (field, "question") for field in ("intent_user", "direct_user", "logic_answer_user", "rewrite_user")
        ],
        contains=[
            ("rewrite_user", "history"),
            ("logic_answer_user", "evidence"),
            ("logic_failed", "reason"),
            ("graph_walk_failed", "reason"),
            ("kb_hint", "kb"),
            ("intent_system", "kb"),
            ("direct_system", "kb"),
        ],
    )
    return prompts


MULTISTAGE_PROMPTS = PromptSetLoader("hxd2_ray.retrieval", "multistage", _language, label="multi-stage")
load_multistage_prompts = MULTISTAGE_PROMPTS.load
load_multistage_prompts_file = MULTISTAGE_PROMPTS.load_file
parse_multistage_prompts = MULTISTAGE_PROMPTS.parse


def system_text(template: str, kb_line: str) -> str:
    """A system template with its ``{kb}`` line filled in, or removed (with its line) when there is none."""
    if kb_line:
        return fill(template, kb=kb_line)
    return "\n".join(line for line in template.splitlines() if line.strip() != "{kb}").replace("{kb}", "").strip()


# --------------------------------------------------------------------------------------------- rules

_PUNCT_CATEGORIES = ("P", "S", "Z", "C")  # punctuation, symbols (emoji), separators, controls


def _fold(text: str) -> str:
    """Lower case, NFKC, punctuation/symbols/spaces collapsed to single spaces, trimmed."""
    norm = unicodedata.normalize("NFKC", text or "").casefold()
    out = []
    for ch in norm:
        if ch == "_" or ch == "-":
            out.append(ch)
        elif unicodedata.category(ch)[0] in _PUNCT_CATEGORIES:
            out.append(" ")
        else:
            out.append(ch)
    return " ".join("".join(out).split())


_GREETINGS = frozenset(
    _fold(g)
    for g in (
        "hi",
        "hello",
        "hey",
        "hiya",
        "howdy",
        "yo",
        "hi there",
        "hello there",
        "hey there",
        "greetings",
        "good morning",
        "good afternoon",
        "good evening",
        "morning",
        "thanks",
        "thank you",
        "thank you very much",
        "thanks a lot",
        "many thanks",
        "thx",
        "ty",
        "cheers",
        "bye",
        "goodbye",
        "good bye",
        "see you",
        "ok thanks",
        "ok thank you",
        "你好",
        "您好",
        "你好呀",
        "你好啊",
        "大家好",
        "嗨",
        "哈喽",
        "哈啰",
        "嗨喽",
        "在吗",
        "在么",
        "早",
        "早上好",
        "上午好",
        "中午好",
        "下午好",
        "晚上好",
        "早安",
        "晚安",
        "谢谢",
        "谢谢你",
        "谢谢您",
        "多谢",
        "感谢",
        "非常感谢",
        "谢啦",
        "再见",
        "拜拜",
        "好的谢谢",
        "好的 谢谢",
    )
)
# An identity phrase, alone or with a greeting around it ("hi, who are you?").
_IDENTITY = tuple(
    _fold(p)
    for p in (
        "who are you",
        "what are you",
        "who am i talking to",
        "who am i speaking with",
        "what is your name",
        "what's your name",
        "whats your name",
        "introduce yourself",
        "tell me about yourself",
        "are you a bot",
        "are you a robot",
        "are you human",
        "are you an ai",
        "你是谁",
        "你是什么",
        "你叫什么",
        "你叫什么名字",
        "你的名字",
        "介绍一下你自己",
        "介绍下你自己",
        "自我介绍",
        "你是机器人吗",
        "你是人吗",
        "你是ai吗",
    )
)
_IDENTITY_SLACK = 12  # characters of greeting/filler allowed around an identity phrase


def rule_intent(question: str) -> str | None:
    """The intent when a cheap rule is sure of it, else None (ask the LLM)."""
    folded = _fold(question)
    if not folded:
        return None
    if folded in _GREETINGS:
        return "greeting"
    # "hello hello", "hi, thanks": every part a greeting
    parts = [p for p in re.split(r"\s+", folded) if p]
    if len(parts) <= 4 and all(p in _GREETINGS for p in parts):
        return "greeting"
    for phrase in _IDENTITY:
        if phrase in folded and len(folded) <= len(phrase) + _IDENTITY_SLACK:
            rest = folded.replace(phrase, " ")
            rest_parts = [p for p in rest.split() if p not in ("please", "请", "请问", "呀", "啊", "呢", "吗")]
            if all(p in _GREETINGS for p in rest_parts):
                return "identity"
    return None


# ----------------------------------------------------------------------------------------- the reply


def parse_intent(text: str | None, labels: Mapping[str, tuple[str, ...]] | None = None) -> str | None:
    """The intent named in an LLM reply, or None when the reply names none, or is ambiguous.

    Read order: the reply is exactly a label; the reply starts with a label (or one of its words) and names no
    other intent; exactly one intent's words appear anywhere in the reply. Ambiguity resolves toward
    ``question`` (fail open): a reply that starts with "question" is a question whatever follows, one that
    starts with another label but also names a second intent is unreadable.
    """
    folded = _fold(text or "")
    if not folded:
        return None
    compact = folded.replace(" ", "_")
    if compact in INTENTS:
        return compact
    vocab = {i: tuple(w for w in (_fold(x) for x in (i, *((labels or {}).get(i, ())))) if w) for i in INTENTS}
    mentioned = {i for i in INTENTS if any(_mentions(folded, w) for w in vocab[i])}
    for intent in ("off_topic", "identity", "greeting", "question"):  # longest labels first
        for w in sorted(vocab[intent], key=len, reverse=True):
            if folded == w or folded.startswith(w + " ") or (_is_cjk(w[0]) and folded.startswith(w)):
                if intent == "question" or mentioned <= {intent}:
                    return intent
                return None
    if len(mentioned) == 1:
        return mentioned.pop()
    return None


def _mentions(folded: str, word: str) -> bool:
    if _is_cjk(word[0]):
        return word in folded
    return re.search(r"(?<![a-z0-9_])" + re.escape(word) + r"(?![a-z0-9_])", folded) is not None


def _is_cjk(ch: str) -> bool:
    return "\u3400" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff"


@dataclass(frozen=True, slots=True)
class Intent:
    label: str  # one of INTENTS
    source: str  # rule | llm | fallback (unreadable reply / failed call -> question) | disabled
    raw: str = ""  # the LLM reply, verbatim
    reason: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def needs_retrieval(self) -> bool:
        return self.label == "question"

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "source": self.source,
            "raw": self.raw,
            "reason": self.reason,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


class IntentClassifier:
    """``classify(question)`` -> :class:`Intent`: rules first, then at most one LLM call (fails open)."""

    def __init__(
        self,
        llm: LLMClient | None,
        prompts: MultiStagePromptSet | None = None,
        *,
        use_llm: bool = True,
        kb_description: str = "",
        constrained: bool = True,
        max_tokens: int = 16,
    ):
        self.llm = llm
        self.prompts = prompts or load_multistage_prompts()
        self.use_llm = use_llm and llm is not None
        self.kb_description = kb_description
        self.constrained = constrained
        self.max_tokens = max_tokens

    def request(self, question: str, language: str | None = None) -> LLMRequest:
        lang = language if language and language != "auto" else detect_language(question)
        lp = self.prompts.for_language(lang)
        system = system_text(lp.intent_system, lp.kb_line(self.kb_description))
        user = fill(lp.intent_user, question=question.strip())
        return LLMRequest(
            messages=({"role": "system", "content": system}, {"role": "user", "content": user}),
            max_tokens=self.max_tokens,
            temperature=0.0,
            choices=INTENTS if self.constrained else None,
            tag="intent",
        )

    def classify(self, question: str, language: str | None = None) -> Intent:
        label = rule_intent(question)
        if label is not None:
            return Intent(label, "rule", reason="matched a fixed phrase")
        if not self.use_llm:
            return Intent("question", "fallback", reason="no rule matched and the LLM layer is off")
        lang = language if language and language != "auto" else detect_language(question)
        try:
            resp = self.llm.complete([self.request(question, lang)])[0]  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001 - a gate must never take the query down
            return Intent("question", "fallback", reason=f"intent call failed ({type(exc).__name__}: {exc})")
        if resp.error:
            return Intent(
                "question",
                "fallback",
                resp.text,
                f"intent call failed ({resp.error})",
                resp.prompt_tokens,
                resp.completion_tokens,
            )
        parsed = parse_intent(resp.text, self.prompts.for_language(lang).intent_labels)
        if parsed is None:
            return Intent(
                "question",
                "fallback",
                resp.text,
                "unreadable reply; treated as a question",
                resp.prompt_tokens,
                resp.completion_tokens,
            )
        return Intent(parsed, "llm", resp.text, "llm", resp.prompt_tokens, resp.completion_tokens)
