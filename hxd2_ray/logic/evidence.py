"""What running a plan produced: each step's value, the graph reads and facts behind it, and the evidence text.

:class:`LogicFormEvidence` is what the verifier judges and the answer prompt quotes (:meth:`~LogicFormEvidence.format`),
and what a trace records (:meth:`~LogicFormEvidence.to_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from hxd2_ray.logic.plan import KIND_BOOLEAN, KIND_ENTITIES, KIND_NUMBER, KIND_STRINGS, Plan
from hxd2_ray.logic.queries import QueryTrace
from hxd2_ray.logic.safe_math import format_number

__all__ = ["LogicFormEvidence", "StepError", "StepTrace", "Value"]


@dataclass(frozen=True, slots=True)
class Value:
    kind: str  # entities | strings | number | boolean | text
    keys: tuple[str, ...] = ()  # entities
    names: tuple[str, ...] = ()  # entity names (aligned with keys), or the strings
    number: int | float | None = None
    flag: bool | None = None
    text: str = ""
    details: Mapping[str, str] = field(default_factory=dict)  # key -> annotation (sort attribute…)

    @staticmethod
    def entities(
        pairs: Iterable[tuple[str, str]], *, ordered: bool = False, details: Mapping[str, str] | None = None
    ) -> "Value":
        uniq = dict(pairs)
        items = list(uniq.items()) if ordered else sorted(uniq.items(), key=lambda kv: (kv[1].casefold(), kv[0]))
        return Value(
            KIND_ENTITIES,
            tuple(k for k, _ in items),
            tuple(n for _, n in items),
            details=MappingProxyType(dict(details or {})),
        )

    def items(self) -> list[str]:
        """What this value says, as display strings."""
        if self.kind in (KIND_ENTITIES, KIND_STRINGS):
            return list(self.names)
        if self.kind == KIND_NUMBER:
            return [format_number(self.number)] if self.number is not None else []
        if self.kind == KIND_BOOLEAN:
            return ["yes" if self.flag else "no"]
        return [self.text] if self.text else []

    def summary(self, max_items: int = 20) -> str:
        items = self.items()
        if self.kind == KIND_ENTITIES and self.details:
            items = [f"{n} ({self.details[k]})" if k in self.details else n for k, n in zip(self.keys, self.names)]
        if not items:
            return "(none)"
        shown = items[:max_items]
        more = f" … ({len(items) - max_items} more)" if len(items) > max_items else ""
        return ", ".join(shown) + more

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind}
        if self.kind == KIND_ENTITIES:
            d["keys"] = list(self.keys)
            d["names"] = list(self.names)
            if self.details:
                d["details"] = dict(self.details)
        elif self.kind == KIND_STRINGS:
            d["items"] = list(self.names)
        elif self.kind == KIND_NUMBER:
            d["number"] = self.number
        elif self.kind == KIND_BOOLEAN:
            d["flag"] = self.flag
        else:
            d["text"] = self.text
        return d


@dataclass
class StepTrace:
    index: int
    question: str
    op: str
    alias: str | None
    args: dict[str, Any]  # JSON form, as planned
    queries: list[QueryTrace] = field(default_factory=list)
    value: Value | None = None
    facts: list[str] = field(default_factory=list)  # the graph facts the step used
    sub_answer: str = ""
    error: str = ""
    notes: list[str] = field(default_factory=list)  # linking, direction relaxed, skipped items…

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "question": self.question,
            "op": self.op,
            "alias": self.alias,
            "args": self.args,
            "queries": [{"template": q.template, "params": dict(q.params), "rows": q.rows} for q in self.queries],
            "value": self.value.to_dict() if self.value is not None else None,
            "facts": list(self.facts),
            "sub_answer": self.sub_answer,
            "error": self.error,
            "notes": list(self.notes),
        }


@dataclass
class LogicFormEvidence:
    question: str
    plan: Plan
    steps: list[StepTrace] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)  # final answer candidates (display strings)
    answer_values: dict[str, Value] = field(default_factory=dict)  # output alias -> value
    failed: bool = False
    failure: str = ""  # why, when failed: the pipeline falls back to dual-level retrieval
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed

    def format(self, max_facts_per_step: int = 20, max_items: int = 30) -> str:
        """Evidence text for the answer prompt and the verifier: sub-questions, sub-answers and facts."""
        lines = ["## Sub-questions and answers"]
        for st in self.steps:
            ref = f" -> ${st.alias}" if st.alias else ""
            lines.append(f"{st.index + 1}. {st.question or st.op} [{st.op}{ref}]")
            if st.error:
                lines.append(f"   Error: {st.error}")
            elif st.value is not None:
                lines.append(f"   Answer: {st.value.summary(max_items)}")
            for fact in st.facts[:max_facts_per_step]:
                lines.append(f"   - {fact}")
            if len(st.facts) > max_facts_per_step:
                lines.append(f"   - … {len(st.facts) - max_facts_per_step} more facts")
        if self.answers:
            lines.append("## Answer candidates")
            lines.append(", ".join(self.answers[:max_items]) + (" …" if len(self.answers) > max_items else ""))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "plan": self.plan.to_json(),
            "steps": [s.to_dict() for s in self.steps],
            "answers": list(self.answers),
            "failed": self.failed,
            "failure": self.failure,
            "llm_calls": self.llm_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "seconds": self.seconds,
        }


class StepError(Exception):
    """A step that cannot produce its result (no entity, no facts, bad operand…): evidence fails."""
