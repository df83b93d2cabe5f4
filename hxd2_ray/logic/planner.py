"""Logic-form planning: question -> validated :class:`~hxd2_ray.logic.plan.Plan`, with one repair round.

The LLM gets the operator list and worked examples (``prompts/logic_<version>.yaml``, zh and en) and replies
with ``{"steps": [...]}``; with a backend that supports it the reply is constrained by
:func:`~hxd2_ray.logic.plan.plan_json_schema`, otherwise it is read tolerantly (code fences, chatter).
An invalid plan is sent back once with the validator's reason; a second invalid plan fails the planning
(the pipeline then falls back to dual-level retrieval). The reference parsed function-call strings with
regexes and turned malformed output into an empty plan silently; here every failure has a reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from hxd2_ray.chunking.splitter import detect_language
from hxd2_ray.llm.base import LLMClient, LLMRequest
from hxd2_ray.logic.plan import MAX_STEPS, MAX_TEXT_CHARS, Plan, PlanError
from hxd2_ray.logic.plan_validation import plan_json_schema, validate_plan
from hxd2_ray.prompt_templates import (
    PromptSet,
    PromptSetLoader,
    check_placeholders,
    placeholder_filler,
    section_text,
)

__all__ = [
    "LogicFormPlanner",
    "LogicLanguagePrompts",
    "LogicPromptSet",
    "PlanResult",
    "fill",
    "load_logic_prompts",
    "load_logic_prompts_file",
    "parse_logic_prompts",
]


PLACEHOLDERS = ("question", "relations", "reason", "evidence", "answer", "examples")


fill = placeholder_filler(PLACEHOLDERS)


@dataclass(frozen=True, slots=True)
class LogicLanguagePrompts:
    plan_system: str  # examples already filled in
    plan_user: str  # {relations} {question}
    relations_hint: str  # {relations}
    repair: str  # {reason}
    deduce_system: str
    deduce_user: str  # {evidence} {question}
    verify_pre_system: str
    verify_pre_user: str  # {evidence} {question}
    verify_post_system: str
    verify_post_user: str  # {evidence} {answer} {question}
    examples: tuple[tuple[str, Plan], ...]


LogicPromptSet = PromptSet[LogicLanguagePrompts]


def _language(lang: str, section: Any) -> LogicLanguagePrompts:
    def get(*path: str) -> str:
        return section_text("logic", lang, section, path)

    raw_examples = section.get("examples") if isinstance(section, dict) else None
    if not isinstance(raw_examples, list) or not raw_examples:
        raise ValueError(f"logic prompt file: {lang}.examples must be a non-empty list")
    examples: list[tuple[str, Plan]] = []
    rendered: list[str] = []
    label_q, label_p = ("问题", "计划") if lang == "zh" else ("Question", "Plan")
    for i, ex in enumerate(raw_examples):
        if not isinstance(ex, dict) or not isinstance(ex.get("question"), str):
            raise ValueError(f"logic prompt file: {lang}.examples[{i}] needs a question and a plan")
        plan = validate_plan(ex.get("plan"))
        if isinstance(plan, PlanError):
            raise ValueError(f"logic prompt file: {lang}.examples[{i}] is not a valid plan: {plan}")
        examples.append((ex["question"], plan))
        rendered.append(f"{label_q}: {ex['question']}\n{label_p}: {plan.dumps()}")
    heading = "示例" if lang == "zh" else "Examples"
    prompts = LogicLanguagePrompts(
        plan_system=fill(get("plan", "system"), examples=f"{heading}:\n\n" + "\n\n".join(rendered)),
        plan_user=get("plan", "user"),
        relations_hint=get("plan", "relations"),
        repair=get("repair"),
        deduce_system=get("deduce", "system"),
        deduce_user=get("deduce", "user"),
        verify_pre_system=get("verify_pre", "system"),
        verify_pre_user=get("verify_pre", "user"),
        verify_post_system=get("verify_post", "system"),
        verify_post_user=get("verify_post", "user"),
        examples=tuple(examples),
    )
    check_placeholders(
        "logic",
        lang,
        prompts,
        ends_with=[(f, "question") for f in ("plan_user", "deduce_user", "verify_pre_user", "verify_post_user")],
        contains=[
            ("deduce_user", "evidence"),
            ("verify_pre_user", "evidence"),
            ("verify_post_user", "evidence"),
            ("verify_post_user", "answer"),
            ("repair", "reason"),
            ("relations_hint", "relations"),
            ("plan_user", "relations"),
        ],
    )
    return prompts


LOGIC_PROMPTS = PromptSetLoader("hxd2_ray.logic", "logic", _language)
load_logic_prompts = LOGIC_PROMPTS.load
load_logic_prompts_file = LOGIC_PROMPTS.load_file
parse_logic_prompts = LOGIC_PROMPTS.parse


# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlanResult:
    plan: Plan | None
    error: str = ""  # why planning failed ("" when a plan was produced)
    replies: tuple[str, ...] = ()  # raw LLM replies, in order
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    repaired: bool = False  # the first plan was invalid and the repair round fixed it
    first_error: str = ""  # the validator's reason for the first reply, when it was rejected
    language: str = "en"
    prompt_version: str = ""

    @property
    def ok(self) -> bool:
        return self.plan is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "plan": self.plan.to_json() if self.plan else None,
            "error": self.error,
            "replies": list(self.replies),
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "repaired": self.repaired,
            "first_error": self.first_error,
            "language": self.language,
            "prompt_version": self.prompt_version,
        }


class LogicFormPlanner:
    """``plan(question)`` -> :class:`PlanResult`: one LLM call, plus one repair call for an invalid plan."""

    def __init__(
        self,
        llm: LLMClient,
        prompts: LogicPromptSet | None = None,
        *,
        max_tokens: int = 1024,
        temperature: float = 0.0,
        max_steps: int = MAX_STEPS,
        max_relations_in_prompt: int = 64,
        max_text_chars: int = MAX_TEXT_CHARS,
    ):
        self.llm = llm
        self.prompts = prompts or load_logic_prompts()
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.max_steps = max_steps
        self.max_relations_in_prompt = max_relations_in_prompt
        self._schema = (
            plan_json_schema(max_steps, max_text_chars) if getattr(llm, "supports_json_schema", False) else None
        )

    def messages(self, question: str, language: str, relations: Sequence[str] = ()) -> list[dict[str, str]]:
        lp = self.prompts.for_language(language)
        hint = ""
        rels = [r for r in dict.fromkeys(relations) if r][: self.max_relations_in_prompt]
        if rels:
            hint = fill(lp.relations_hint, relations=", ".join(rels))
        user = fill(lp.plan_user, relations=hint, question=question.strip()).lstrip()
        return [{"role": "system", "content": lp.plan_system}, {"role": "user", "content": user}]

    def plan(self, question: str, *, language: str | None = None, relations: Sequence[str] = ()) -> PlanResult:
        """Plan ``question``; ``relations``: the graph's relation names, shown to the LLM as a hint."""
        lang = language if language and language != "auto" else detect_language(question)
        lp = self.prompts.for_language(lang)
        messages = self.messages(question, lang, relations)
        replies: list[str] = []
        tokens = [0, 0]

        def call(msgs: list[dict[str, str]], tag: str) -> tuple[str, str]:
            req = LLMRequest(
                messages=tuple(msgs),
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                json_schema=self._schema,
                tag=tag,
            )
            resp = self.llm.complete([req])[0]
            tokens[0] += resp.prompt_tokens
            tokens[1] += resp.completion_tokens
            replies.append(resp.text)
            return resp.text, resp.error

        def result(plan: Plan | None, error: str = "", **extra: Any) -> PlanResult:
            return PlanResult(
                plan=plan,
                error=error,
                replies=tuple(replies),
                calls=len(replies),
                prompt_tokens=tokens[0],
                completion_tokens=tokens[1],
                language=lang,
                prompt_version=self.prompts.version_hash,
                **extra,
            )

        text, err = call(messages, "logic_plan")
        if err:
            return result(None, f"LLM error while planning: {err}")
        first = validate_plan(text, max_steps=self.max_steps)
        if isinstance(first, Plan):
            return result(first)

        repair_msgs = messages + [
            {"role": "assistant", "content": text},
            {"role": "user", "content": fill(lp.repair, reason=str(first))},
        ]
        text2, err2 = call(repair_msgs, "logic_repair")
        if err2:
            return result(None, f"LLM error while repairing the plan ({first}): {err2}", first_error=str(first))
        second = validate_plan(text2, max_steps=self.max_steps)
        if isinstance(second, Plan):
            return result(second, repaired=True, first_error=str(first))
        return result(None, f"invalid plan after one repair: {second} (first reply: {first})", first_error=str(first))


def plan_to_text(plan: Plan) -> str:
    """Pretty JSON of a plan (logs, CLI)."""
    return json.dumps(plan.to_json(), ensure_ascii=False, indent=2)
