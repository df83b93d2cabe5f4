"""A judge reply read as a verdict (A, B or tie, in English or Chinese, however phrased), both orders of a pair
combined, and the win rates with their intervals."""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

VERDICTS = ("A", "B", "tie")
# ---------------------------------------------------------------------------------------------- parsing

_TIE_WORDS = (
    "tie",
    "draw",
    "equal",
    "equally good",
    "equally bad",
    "same",
    "both",
    "neither",
    "平局",
    "平手",
    "打平",
    "相同",
    "一样",
    "一样好",
    "一样差",
    "相当",
    "不分上下",
    "两者相当",
)
_NB = r"(?<![a-z0-9])"  # no letter/digit before (IGNORECASE: either case)
_NA = r"(?![a-z0-9])"  # no letter/digit after
_ANSWER = r"(?:(?:the\s+)?(?:answer|response|option)\s*|回答\s*|答案\s*)?"
_LABEL = r"(a|b|tie|draw|平局|平手)"
_BRACKETED = re.compile(r"\[\[\s*(a|b|c|tie)\s*\]\]", re.IGNORECASE)
_JSON_WINNER = re.compile(r"[\"']?(?:winner|verdict)[\"']?\s*:\s*[\"']([^\"']*)[\"']", re.IGNORECASE)
# "Winner: B", "verdict is A", "更好的回答是A"
_KEYED = re.compile(
    r"(?:winner|verdict|better\s+answer|final\s+answer|decision|胜者|获胜者|结论|判定|"
    r"更好的(?:回答|答案)?)\s*(?:is|是|为)?\s*[:：=]?\s*[\"'“”*\[(（【]*\s*" + _ANSWER + _LABEL + _NA,
    re.IGNORECASE,
)
# "B is better", "Answer A wins", "A更好"
_PREFERRED = re.compile(
    _NB + _ANSWER + r"(a|b)\s*(?:is\s+(?:better|superior|preferred|more\s+\w+)|wins|"
    r"更好|更佳|较好|胜出|更优|更准确|更全面|更正确)",
    re.IGNORECASE,
)
_TIE_STATEMENT = re.compile(
    _NB + r"(?:tie|draw|equally\s+(?:good|bad|correct|wrong)|平局|平手|不分上下|一样好|"
    r"一样差|两者相当)" + _NA,
    re.IGNORECASE,
)
_LEADING = re.compile(r"^\s*" + _ANSWER + _LABEL + _NA, re.IGNORECASE)
_STANDALONE = {"A": re.compile(_NB + "a" + _NA, re.IGNORECASE), "B": re.compile(_NB + "b" + _NA, re.IGNORECASE)}
_STRIP = " \t\r\n\"'`*.,;:!?。，；：！？()[]{}（）【】「」<>"


def _label(word: str) -> str | None:
    w = word.strip(_STRIP).lower()
    w = re.sub(r"^(?:(?:the\s+)?(?:answer|response|option)|回答|答案)\s*", "", w).strip(_STRIP)
    if w == "a":
        return "A"
    if w == "b":
        return "B"
    if w in _TIE_WORDS or re.fullmatch(r"tie[sd]?", w):
        return "tie"
    return None


def parse_verdict(text: str) -> str | None:
    """``"A"``, ``"B"`` or ``"tie"`` from a judge reply; None when it cannot be read.

    Reads, in order: a JSON object's ``winner``/``verdict`` (also from a reply cut off after it), a bare label
    (any case, "Answer B", "tie", "平局"), MT-Bench style ``[[A]]``/``[[B]]``/``[[C]]`` (C: tie), a keyed or
    preference statement ("Winner: B", "A is better", "更好的回答是A", "B更好"), a tie statement ("equally
    good", "不分上下"), and a label leading the reply ("A. Because ...") when the other answer's label does not
    appear. A reply naming no answer, or contradicting itself, is unreadable.
    """
    if not isinstance(text, str) or not text.strip():
        return None
    s = text.strip()
    if s.startswith("```"):
        s = s.strip("`").strip().removeprefix("json").strip()
    if s.startswith("{"):
        try:
            obj = json.loads(s)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            for key in ("winner", "verdict", "better", "choice", "answer"):
                if key in obj:
                    return _label(str(obj[key]))
            return None
    m = _JSON_WINNER.search(s)
    if m:
        return _label(m.group(1))
    direct = _label(s)
    if direct is not None:
        return direct
    brackets = {_label(x) or "tie" for x in _BRACKETED.findall(s)}
    if brackets:
        return brackets.pop() if len(brackets) == 1 else None
    stated = {_label(x) for x in _KEYED.findall(s)} | {_label(x) for x in _PREFERRED.findall(s)}
    if stated:
        return stated.pop() if len(stated) == 1 else None
    if _TIE_STATEMENT.search(s):
        return "tie"
    m = _LEADING.match(s)
    if m:
        label = _label(m.group(1))
        other = {"A": "B", "B": "A"}.get(label or "")
        if other is None or not _STANDALONE[other].search(s[m.end() :]):
            return label
    return None


def _reason(text: str) -> str:
    try:
        obj = json.loads(text)
    except (ValueError, TypeError):
        return ""
    return str(obj.get("reason") or "") if isinstance(obj, dict) else ""


# ---------------------------------------------------------------------------------------------- verdicts


@dataclass(frozen=True, slots=True)
class JudgeItem:
    """One pair to judge; ``reference`` is the gold answer (empty when the benchmark has none)."""

    id: str
    question: str
    answer_a: str
    answer_b: str
    reference: str = ""


@dataclass(slots=True)
class PairVerdict:
    id: str
    criterion: str
    verdict: str  # "A" | "B" | "tie" | "invalid"
    consistent: bool | None  # both orders agree; None when invalid
    a_first: str | None  # verdict (in answer labels) with A shown first; None: unreadable / failed
    b_first: str | None  # verdict (in answer labels) with B shown first, mapped back to A/B
    raw_a_first: str = ""
    raw_b_first: str = ""
    reason_a_first: str = ""
    reason_b_first: str = ""
    errors: list[str] = field(default_factory=list)
    identical: bool = False  # same answer text: a tie without an LLM call


def swap(verdict: str | None) -> str | None:
    """A verdict given with B shown first (the judge's "A" is answer B) in answer labels."""
    return {"A": "B", "B": "A"}.get(verdict, verdict) if verdict is not None else None


def combine(a_first: str | None, b_first: str | None) -> tuple[str, bool | None]:
    """(verdict, consistent) of the two orders, both already in answer labels."""
    if a_first is None or b_first is None:
        return "invalid", None
    if a_first == b_first:
        return a_first, True
    return "tie", False


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    if n <= 0:
        return None
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_interval(
    values: Sequence[float], *, resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float] | None:
    """Percentile bootstrap CI of the mean (seeded, so a report is reproducible)."""
    n = len(values)
    if n == 0:
        return None
    rng = random.Random(seed)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    lo = means[int(math.floor((1 - level) / 2 * (resamples - 1)))]
    hi = means[int(math.ceil((1 + level) / 2 * (resamples - 1)))]
    return lo, hi


def summarize(verdicts: Sequence[PairVerdict], *, seed: int = 0) -> dict[str, Any]:
    """Totals of one criterion's verdicts."""
    counts = {v: sum(1 for x in verdicts if x.verdict == v) for v in ("A", "B", "tie", "invalid")}
    valid = len(verdicts) - counts["invalid"]
    scores = [
        1.0 if x.verdict == "A" else 0.5 if x.verdict == "tie" else 0.0 for x in verdicts if x.verdict != "invalid"
    ]
    decisive = counts["A"] + counts["B"]
    replies = [r for x in verdicts if not x.identical for r in (x.a_first, x.b_first)]
    # Position picks: with A first, "A" is the first position; with B first, "B" is.
    first = sum(1 for x in verdicts if not x.identical for r, f in ((x.a_first, "A"), (x.b_first, "B")) if r == f)
    second = sum(1 for x in verdicts if not x.identical for r, f in ((x.a_first, "B"), (x.b_first, "A")) if r == f)
    ci = bootstrap_interval(scores, seed=seed)
    wilson = wilson_interval(counts["A"], decisive)
    return {
        "n": len(verdicts),
        "wins_a": counts["A"],
        "wins_b": counts["B"],
        "ties": counts["tie"],
        "inconsistent": sum(1 for x in verdicts if x.consistent is False),
        "invalid": counts["invalid"],
        "identical": sum(1 for x in verdicts if x.identical),
        "valid": valid,
        "win_rate_a": sum(scores) / valid if valid else None,
        "win_rate_a_ci95": list(ci) if ci else None,
        "decisive": decisive,
        "a_share_of_decisive": counts["A"] / decisive if decisive else None,
        "a_share_of_decisive_wilson95": list(wilson) if wilson else None,
        "replies": len(replies),
        "invalid_replies": sum(1 for r in replies if r is None),
        "llm_errors": sum(len(x.errors) for x in verdicts),
        "first_position_picks": first,
        "second_position_picks": second,
    }


@dataclass
class JudgeResult:
    verdicts: list[PairVerdict]
    totals: dict[str, dict[str, Any]]  # criterion -> summarize()
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"info": self.info, "totals": self.totals, "verdicts": [asdict(v) for v in self.verdicts]}

    def to_markdown(self, label_a: str = "A", label_b: str = "B", limit: int = 200) -> str:
        lines = [f"# Pairwise judge: A = {label_a}, B = {label_b}", ""]
        if self.info:
            lines += [", ".join(f"{k}: `{v}`" for k, v in self.info.items()), ""]
        lines += [
            "Each pair is judged twice (A shown first, then B shown first); a win needs both orders to agree, "
            "a disagreement is a tie counted as inconsistent, an unreadable or failed reply makes the pair "
            "invalid. Win rate of A = (wins A + ties / 2) / valid pairs, 95% percentile-bootstrap CI; "
            "A share of decisive = wins A / (wins A + wins B), 95% Wilson CI.",
            "",
            "| Criterion | Pairs | Wins A | Wins B | Ties | Inconsistent | Invalid | Win rate A (95% CI) | "
            "A share of decisive (95% CI) | First / second position picks |",
            "|---|---:|---:|---:|---:|---:|---:|---|---|---|",
        ]
        for crit, t in self.totals.items():
            lines.append(
                f"| {crit} | {t['n']} | {t['wins_a']} | {t['wins_b']} | {t['ties']} | {t['inconsistent']} | "
                f"{t['invalid']} | {_rate(t['win_rate_a'], t['win_rate_a_ci95'])} | "
                f"{_rate(t['a_share_of_decisive'], t['a_share_of_decisive_wilson95'])} | "
                f"{t['first_position_picks']} / {t['second_position_picks']} |"
            )
        lines += [
            "",
            "## Verdicts",
            "",
            "| Question | Criterion | Verdict | A shown first | B shown first | Note |",
            "|---|---|---|---|---|---|",
        ]
        for v in self.verdicts[:limit]:
            note = (
                "identical answers"
                if v.identical
                else "inconsistent"
                if v.consistent is False
                else ("; ".join(v.errors) or ("unreadable reply" if v.verdict == "invalid" else ""))
            )
            lines.append(
                f"| {_cell(v.id)} | {v.criterion} | {v.verdict} | {v.a_first or '–'} | {v.b_first or '–'} | "
                f"{_cell(note)} |"
            )
        if len(self.verdicts) > limit:
            lines.append(f"| … {len(self.verdicts) - limit} more (see judge.json) | | | | | |")
        return "\n".join(lines) + "\n"


def _rate(v: float | None, ci: Sequence[float] | None) -> str:
    if v is None:
        return "–"
    return f"{v:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"{v:.3f}"


def _cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")[:200]
