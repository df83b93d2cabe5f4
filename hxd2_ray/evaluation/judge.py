"""Pairwise LLM-as-judge for open-ended answers, with the order swapped to cancel position bias.

Every pair (question, answer A, answer B) is judged twice by the judge LLM: once with A shown first and once
with B shown first. The two verdicts, mapped back to the answers, are combined:

* both orders name the same answer -> that answer wins; both say tie -> tie;
* the orders disagree (A/B, A/tie, ...) -> tie, counted as *inconsistent* (a judge that always prefers the
  first position produces only these, so its position bias cancels instead of turning into wins);
* either reply unreadable (or its LLM call failed) -> *invalid*: counted, left out of the win rate, not fatal.

Identical answers are ties without an LLM call. The reply is constrained to a JSON schema
(``{"winner": "A"|"B"|"tie", "reason": ...}``) where the backend supports it and read by a tolerant parser
otherwise ("A", "b", "Answer B", "[[A]]", "tie", "平局", ...). All requests of a run go to ``llm.complete``
in chunks of ``batch_size`` so vLLM batches them. Criteria are named texts of the prompt file (``overall``
by default; ``correctness``, ``comprehensiveness``, ``faithfulness``) or custom texts; each criterion is
judged separately.

Totals per criterion: wins of A and B, ties (inconsistent included), inconsistent, invalid, and the win rate
of A = (wins A + ties / 2) / valid pairs with a seeded percentile-bootstrap CI over questions, plus the share
of A among the decisive pairs with a Wilson interval. Plain Python: no Ray.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Sequence

from hxd2_ray.chunking.splitter import detect_language
from hxd2_ray.evaluation.judge_verdicts import (
    VERDICTS,
    JudgeItem,
    JudgeResult,
    PairVerdict,
    _rate,
    _reason,
    bootstrap_interval,
    combine,
    parse_verdict,
    summarize,
    swap,
    wilson_interval,
)
from hxd2_ray.evaluation.report_plots import new_figure, save_figure
from hxd2_ray.llm.base import LLMClient, LLMRequest, LLMResponse
from hxd2_ray.prompt_templates import (
    PromptSet,
    PromptSetLoader,
    check_placeholders,
    placeholder_filler,
)

TAG = "pairwise_judge"
DEFAULT_CRITERIA = ("overall",)
PLACEHOLDERS = ("criterion", "reply", "question", "reference", "answer_a", "answer_b")
JSON_SCHEMA: Mapping[str, Any] = MappingProxyType(
    {
        "type": "object",
        "properties": {
            "winner": {"type": "string", "enum": list(VERDICTS)},  # first, so a cut-off reply still has it
            "reason": {"type": "string", "maxLength": 240},  # bounded: the reply fits the default 128 tokens
        },
        "required": ["winner", "reason"],
        "additionalProperties": False,
    }
)

fill = placeholder_filler(PLACEHOLDERS)


# ---------------------------------------------------------------------------------------------- prompts


@dataclass(frozen=True, slots=True)
class JudgeLanguagePrompts:
    system: str  # {criterion} {reply}
    user: str  # {question} {reference} {answer_a} {answer_b} {reply}
    reference: str  # {reference}; left out when the question has no gold answer
    reply_json: str
    reply_text: str
    criteria: Mapping[str, str]


JudgePromptSet = PromptSet[JudgeLanguagePrompts]


def criteria_of(prompts: JudgePromptSet) -> tuple[str, ...]:
    """The criteria a prompt set defines (its English section's names)."""
    return tuple(prompts.languages["en"].criteria)


def _language(lang: str, section: Any) -> JudgeLanguagePrompts:
    def text(name: str) -> str:
        node = section.get(name) if isinstance(section, dict) else None
        if not isinstance(node, str) or not node.strip():
            raise ValueError(f"judge prompt file: {lang}.{name} must be a non-empty string")
        return node.strip()

    criteria = section.get("criteria") if isinstance(section, dict) else None
    if not isinstance(criteria, dict) or not criteria:
        raise ValueError(f"judge prompt file: {lang}.criteria must map criterion names to texts")
    if bad := [k for k, v in criteria.items() if not isinstance(v, str) or not v.strip()]:
        raise ValueError(f"judge prompt file: {lang}.criteria {bad} must be non-empty strings")
    prompts = JudgeLanguagePrompts(
        system=text("system"),
        user=text("user"),
        reference=text("reference"),
        reply_json=text("reply_json"),
        reply_text=text("reply_text"),
        criteria=MappingProxyType({str(k): v.strip() for k, v in criteria.items()}),
    )
    needed = [("user", name) for name in ("question", "reference", "answer_a", "answer_b")]
    check_placeholders("judge", lang, prompts, contains=[*needed, ("system", "criterion"), ("reference", "reference")])
    return prompts


JUDGE_PROMPTS = PromptSetLoader("hxd2_ray.evaluation", "judge", _language)
load_judge_prompts = JUDGE_PROMPTS.load
load_judge_prompts_file = JUDGE_PROMPTS.load_file
parse_judge_prompts = JUDGE_PROMPTS.parse


# ---------------------------------------------------------------------------------------------- judge


class PairwiseJudge:
    """Judge pairs of answers with an :class:`LLMClient`, both orders, all requests batched."""

    def __init__(
        self,
        llm: LLMClient,
        *,
        criteria: Sequence[str] | Mapping[str, str] = DEFAULT_CRITERIA,
        prompts: JudgePromptSet | None = None,
        language: str = "auto",
        batch_size: int = 256,
        max_tokens: int = 128,
        max_answer_chars: int = 2000,
        structured: bool | None = None,
        use_reference: bool = True,
        seed: int = 0,
    ) -> None:
        self.llm = llm
        self.prompts = prompts or load_judge_prompts()
        self.criteria = self._criteria(criteria)
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.language = language
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.max_answer_chars = max_answer_chars
        self.structured = bool(getattr(llm, "supports_json_schema", False)) if structured is None else structured
        self.use_reference = use_reference
        self.seed = seed

    def _criteria(self, criteria: Sequence[str] | Mapping[str, str]) -> dict[str, str | None]:
        """name -> custom text (None: the prompt file's text of that name, in the question's language)."""
        if isinstance(criteria, Mapping):
            out: dict[str, str | None] = {str(k): (str(v) if v else None) for k, v in criteria.items()}
        else:
            out = {}
            for c in criteria:
                name, sep, text = str(c).partition("=")
                out[name.strip()] = text.strip() if sep and text.strip() else None
        if not out:
            raise ValueError("at least one criterion is needed")
        known = criteria_of(self.prompts)
        if bad := [k for k, v in out.items() if v is None and k not in known]:
            raise ValueError(f"unknown criterion {bad}; known: {', '.join(known)} (or give NAME=TEXT)")
        return out

    def _clip(self, text: str) -> str:
        text = text or ""
        return text if len(text) <= self.max_answer_chars else text[: self.max_answer_chars] + " …"

    def request(self, item: JudgeItem, criterion: str, first: str, second: str) -> LLMRequest:
        """The request showing ``first`` as "A" and ``second`` as "B"."""
        lang = self.language
        if not lang or lang == "auto":
            lang = detect_language(item.question)
        lp = self.prompts.for_language(lang)
        custom = self.criteria[criterion]
        crit = custom or lp.criteria.get(criterion) or self.prompts.languages["en"].criteria[criterion]
        reply = lp.reply_json if self.structured else lp.reply_text
        reference = (
            fill(lp.reference, reference=item.reference.strip())
            if (self.use_reference and item.reference.strip())
            else ""
        )
        system = fill(lp.system, criterion=crit, reply=reply)
        user = fill(
            lp.user,
            question=item.question.strip(),
            reference=reference,
            answer_a=self._clip(first),
            answer_b=self._clip(second),
            reply=reply,
        )
        user = re.sub(r"\n{3,}", "\n\n", user)  # an empty reference block leaves no gap
        return LLMRequest(
            messages=({"role": "system", "content": system}, {"role": "user", "content": user}),
            max_tokens=self.max_tokens,
            temperature=0.0,
            json_schema=JSON_SCHEMA if self.structured else None,
            tag=TAG,
        )

    def judge(self, items: Iterable[JudgeItem]) -> JudgeResult:
        items = list(items)
        slots: list[tuple[int, str, PairVerdict]] = []
        requests: list[LLMRequest] = []
        verdicts: list[PairVerdict] = []
        for item in items:
            for crit in self.criteria:
                v = PairVerdict(id=item.id, criterion=crit, verdict="tie", consistent=True, a_first=None, b_first=None)
                verdicts.append(v)
                if (item.answer_a or "").strip() == (item.answer_b or "").strip():
                    v.identical, v.a_first, v.b_first = True, "tie", "tie"
                    continue
                requests.append(self.request(item, crit, item.answer_a, item.answer_b))
                slots.append((len(requests) - 1, "a_first", v))
                requests.append(self.request(item, crit, item.answer_b, item.answer_a))
                slots.append((len(requests) - 1, "b_first", v))
        responses: list[LLMResponse] = []
        for start in range(0, len(requests), self.batch_size):
            chunk = requests[start : start + self.batch_size]
            got = self.llm.complete(chunk)
            if len(got) != len(chunk):
                raise RuntimeError(f"judge LLM returned {len(got)} responses for {len(chunk)} requests")
            responses.extend(got)
        prompt_tokens = completion_tokens = 0
        for (i, order, v), resp in zip(slots, responses):
            prompt_tokens += resp.prompt_tokens
            completion_tokens += resp.completion_tokens
            if resp.error:
                v.errors.append(f"{order}: {resp.error}")
                parsed = None
            else:
                parsed = parse_verdict(resp.text)
            if order == "a_first":
                v.a_first, v.raw_a_first, v.reason_a_first = parsed, resp.text, _reason(resp.text)
            else:
                v.b_first, v.raw_b_first, v.reason_b_first = swap(parsed), resp.text, _reason(resp.text)
        for v in verdicts:
            v.verdict, v.consistent = combine(v.a_first, v.b_first)
        totals = {c: summarize([v for v in verdicts if v.criterion == c], seed=self.seed) for c in self.criteria}
        info = {
            "judge_model": getattr(self.llm, "model_id", ""),
            "prompt_version": self.prompts.version_hash,
            "criteria": list(self.criteria),
            "structured": self.structured,
            "pairs": len(items),
            "llm_requests": len(requests),
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
        }
        return JudgeResult(verdicts=verdicts, totals=totals, info=info)


# ---------------------------------------------------------------------------------------------- pairing


def reference_text(question: Mapping[str, Any]) -> str:
    """The gold answer(s) of a question dict (``EvalItem.to_dict()`` shape); a choice letter gets its option
    text ("B. Rice blast"), so the judge does not read a bare letter as answer B."""
    answers = [str(a) for a in question.get("answers") or () if str(a).strip()]
    options = {str(c[0]).strip(): str(c[1]).strip() for c in question.get("choices") or () if len(c) >= 2}
    return " / ".join(f"{a}. {options[a]}" if a in options else a for a in answers)


def pair_items(
    traces_a: Sequence[Mapping[str, Any]],
    traces_b: Sequence[Mapping[str, Any]],
    questions: Mapping[str, Mapping[str, Any]],
    *,
    limit: int | None = None,
    use_reference: bool = True,
) -> tuple[list[JudgeItem], dict[str, int]]:
    """Judge items of the questions answered in both trace lists (one mode each), in A's order.

    ``questions`` maps a question id to its dict (``question``, ``answers``, ``choices``); a pair whose
    question text is unknown is left out and counted as ``no_question``.
    """
    b = {str(t.get("id")): t for t in traces_b}
    ids_a = [str(t.get("id")) for t in traces_a]
    items: list[JudgeItem] = []
    no_question = 0
    for t in traces_a:
        qid = str(t.get("id"))
        if qid not in b:
            continue
        q = questions.get(qid)
        if not q or not str(q.get("question") or "").strip():
            no_question += 1
            continue
        if limit is not None and len(items) >= limit:
            break
        items.append(
            JudgeItem(
                id=qid,
                question=str(q["question"]),
                answer_a=str(t.get("answer") or ""),
                answer_b=str(b[qid].get("answer") or ""),
                reference=reference_text(q) if use_reference else "",
            )
        )
    set_a = set(ids_a)
    stats = {
        "paired": sum(1 for i in ids_a if i in b),
        "only_in_a": sum(1 for i in set_a if i not in b),
        "only_in_b": sum(1 for i in b if i not in set_a),
        "no_question": no_question,
        "judged": len(items),
    }
    return items, stats


# ---------------------------------------------------------------------------------------------- report


def plot_judge(totals: Mapping[str, Mapping[str, Any]], path: Path, label_a: str = "A", label_b: str = "B") -> Path:
    """Stacked horizontal bars per criterion: wins A, consistent ties, inconsistent, wins B, invalid."""
    crits = list(totals)
    fig = new_figure(7.5, 1.9 + 0.6 * len(crits))
    ax = fig.add_subplot(1, 1, 1)
    parts: list[tuple[str, Callable[[Mapping[str, Any]], float], str]] = [
        (f"wins {label_a}", lambda t: t["wins_a"], "tab:blue"),
        ("tie", lambda t: t["ties"] - t["inconsistent"], "lightgray"),
        ("inconsistent (tie)", lambda t: t["inconsistent"], "darkgray"),
        (f"wins {label_b}", lambda t: t["wins_b"], "tab:orange"),
        ("invalid", lambda t: t["invalid"], "tab:red"),
    ]
    left = [0.0] * len(crits)
    for name, get, colour in parts:
        vals = [float(get(totals[c])) for c in crits]
        ax.barh(range(len(crits)), vals, left=left, color=colour, label=name)
        for i, (start, v) in enumerate(zip(left, vals)):
            if v:
                ax.text(start + v / 2, i, f"{v:.0f}", ha="center", va="center", fontsize=8)
        left = [start + v for start, v in zip(left, vals)]
    ax.set_yticks(range(len(crits)), crits)
    ax.invert_yaxis()  # first criterion on top
    ax.set_title(f"Pairwise judge: {label_a} vs {label_b}")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=5)
    return save_figure(fig, path)


def write_judge_report(
    result: JudgeResult, out_dir: str | Path, label_a: str = "A", label_b: str = "B", *, plots: bool = True
) -> dict[str, Path]:
    """``judge.json``, ``judge.md`` and ``judge.png`` in ``out_dir``; their paths by name."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    if plots and result.totals:
        paths["plot"] = plot_judge(result.totals, out / "judge.png", label_a, label_b)
    md = result.to_markdown(label_a, label_b)
    if "plot" in paths:
        md += f"\n![judge]({paths['plot'].name})\n"
    (out / "judge.md").write_text(md, encoding="utf-8")
    doc = {"label_a": label_a, "label_b": label_b, **result.to_dict()}
    (out / "judge.json").write_text(json.dumps(doc, ensure_ascii=False, indent=2), encoding="utf-8")
    return {"json": out / "judge.json", "markdown": out / "judge.md", **paths}


def format_totals(totals: Mapping[str, Mapping[str, Any]], label_a: str = "A", label_b: str = "B") -> str:
    lines = [
        f"  {'criterion':<18} {'pairs':>5} {'A wins':>6} {'B wins':>6} {'ties':>5} {'incons.':>7} "
        f"{'invalid':>7}  win rate A (95% CI)",
    ]
    for c, t in totals.items():
        lines.append(
            f"  {c:<18} {t['n']:>5} {t['wins_a']:>6} {t['wins_b']:>6} {t['ties']:>5} "
            f"{t['inconsistent']:>7} {t['invalid']:>7}  {_rate(t['win_rate_a'], t['win_rate_a_ci95'])}"
        )
    return f"  A = {label_a}, B = {label_b}\n" + "\n".join(lines)


__all__ = [
    "DEFAULT_CRITERIA",
    "JSON_SCHEMA",
    "JUDGE_PROMPTS",
    "JudgeItem",
    "JudgeLanguagePrompts",
    "JudgePromptSet",
    "JudgeResult",
    "PLACEHOLDERS",
    "PairVerdict",
    "PairwiseJudge",
    "TAG",
    "VERDICTS",
    "bootstrap_interval",
    "combine",
    "criteria_of",
    "fill",
    "format_totals",
    "load_judge_prompts",
    "load_judge_prompts_file",
    "pair_items",
    "parse_judge_prompts",
    "parse_verdict",
    "plot_judge",
    "reference_text",
    "summarize",
    "swap",
    "wilson_interval",
    "write_judge_report",
]
