"""Per-mode scores of a run (aggregate), the verifier's confusion, refusals, and the Markdown report's tables."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

PRIMARY_PREFERENCE = ("accuracy", "f1", "rouge_l", "hits@1", "em", "exact_match", "hit")
METRIC_LABELS = {
    "accuracy": "Accuracy (strict)",
    "accuracy_lenient": "Accuracy (lenient†)",
    "parsed": "Parsed",
    "f1": "F1",
    "exact_match": "Set EM",
    "rouge_l": "ROUGE-L",
    "em": "EM",
    "hits@1": "Hits@1",
    "hit": "Hit",
}
LENIENT_NOTE = (
    "† lenient = the reference's rule `gt.lower() in output.lower()`: any output containing the "
    "letter anywhere counts as correct. Shown only for comparison with the paper; use the strict "
    "number."
)
_YES = ("yes", "y", "true", "pass", "passed", "accept", "accepted", "1")
_NO = ("no", "n", "false", "fail", "failed", "reject", "rejected", "0")


def metric_label(name: str) -> str:
    if name in METRIC_LABELS:
        return METRIC_LABELS[name]
    if name.startswith("recall@"):
        return f"Recall@{name.split('@', 1)[1]}"
    if name.startswith("perfect@"):
        return f"Perfect@{name.split('@', 1)[1]}"
    return name


def verifier_decision(value: Any) -> bool | None:
    """True/False for a yes/no verifier decision, None when there is none or it cannot be read."""
    if isinstance(value, bool):
        return value
    if value is None:
        return None
    s = str(value).strip().lower()
    if not s:
        return None
    if s in _YES or s.startswith("yes"):
        return True
    if s in _NO or s.startswith("no"):
        return False
    return None


def trace_scores(trace: Mapping[str, Any], metrics: Iterable[str] = ()) -> dict[str, float]:
    out: dict[str, float] = {}
    scores = trace.get("scores")
    if isinstance(scores, Mapping):
        out.update({k: float(v) for k, v in scores.items() if _is_number(v)})
    for m in metrics:
        if m not in out and _is_number(trace.get(m)):
            out[m] = float(trace[m])
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def infer_primary_metric(traces: Sequence[Mapping[str, Any]]) -> str | None:
    seen: dict[str, None] = {}
    for t in traces:
        for k in trace_scores(t):
            seen.setdefault(k, None)
    for m in PRIMARY_PREFERENCE:
        if m in seen:
            return m
    return next(iter(seen), None)


def is_correct(trace: Mapping[str, Any], metric: str | None) -> bool | None:
    """``trace["correct"]`` when it is a bool, else primary score >= 0.5; None when neither is known."""
    c = trace.get("correct")
    if isinstance(c, bool):
        return c
    if metric is None:
        return None
    s = trace_scores(trace, (metric,)).get(metric)
    return None if s is None else s >= 0.5


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation percentile (numpy's default method); None for no values."""
    vals = sorted(float(v) for v in values)
    if not vals:
        return None
    pos = (len(vals) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def mean_or_none(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def confusion(decisions: Sequence[bool | None], correct: Sequence[bool | None]) -> dict[str, Any]:
    """Verifier decision x answer correctness counts and derived precision/recall/F1/accuracy."""
    tp = fp = fn = tn = 0
    for d, c in zip(decisions, correct):
        if d is None or c is None:
            continue
        if d and c:
            tp += 1
        elif d:
            fp += 1
        elif c:
            fn += 1
        else:
            tn += 1
    n = tp + fp + fn + tn
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    f1 = 2 * precision * recall / (precision + recall) if precision and recall else (0.0 if n else None)
    return {
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
        "n": n,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "accuracy": (tp + tn) / n if n else None,
    }


def reason_category(reason: str | None) -> str | None:
    """The kind of a trace's ``path_reason``, without its details: "fallback: plan failed: step 2 uses an
    unknown alias 'x'" -> "fallback: plan failed"; numbers are dropped so timings do not split a kind."""
    if not reason or not str(reason).strip():
        return None
    head = ":".join(str(reason).split(":")[:2]).strip()
    head = re.sub(r"\s*\(.*$", "", head)  # "refusal score 0.1 < threshold 0.3 (basis)" -> no details in parens
    head = re.sub(r"[-+]?\d+(\.\d+)?", "N", head)
    return head[:80]


def modes_of(traces: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(str(t.get("mode") or "default") for t in traces))


def traces_of_mode(traces: Sequence[Mapping[str, Any]], mode: str) -> list[Mapping[str, Any]]:
    return [t for t in traces if str(t.get("mode") or "default") == mode]


def aggregate(
    traces: Sequence[Mapping[str, Any]], metrics: Sequence[str] | None = None, primary_metric: str | None = None
) -> dict[str, Any]:
    """Per-mode summary: counts, errors, mean of each metric (over the traces that carry it), latency
    p50/p95/mean, mean prompt/completion tokens, answer paths and the verifier confusion matrix."""
    primary = primary_metric or infer_primary_metric(traces)
    if metrics is None:
        metrics = list(dict.fromkeys(k for t in traces for k in trace_scores(t)))
    out: dict[str, Any] = {}
    for mode in modes_of(traces):
        rows = traces_of_mode(traces, mode)
        per_metric: dict[str, float | None] = {}
        for m in metrics:
            vals = [s[m] for t in rows if m in (s := trace_scores(t, (m,)))]
            per_metric[m] = mean_or_none(vals)
        lat = [float(t["latency_s"]) for t in rows if _is_number(t.get("latency_s"))]
        ptok = [float(t["prompt_tokens"]) for t in rows if _is_number(t.get("prompt_tokens"))]
        ctok = [float(t["completion_tokens"]) for t in rows if _is_number(t.get("completion_tokens"))]
        decisions = [verifier_decision(t.get("verifier")) for t in rows]
        correct = [is_correct(t, primary) for t in rows]
        out[mode] = {
            "n": len(rows),
            "errors": sum(1 for t in rows if t.get("error")),
            "correct": sum(1 for c in correct if c),
            "metrics": per_metric,
            "latency_s": {"p50": percentile(lat, 50), "p95": percentile(lat, 95), "mean": mean_or_none(lat)},
            "prompt_tokens_mean": mean_or_none(ptok),
            "completion_tokens_mean": mean_or_none(ctok),
            "paths": dict(Counter(str(t["path"]) for t in rows if t.get("path"))),
            # a benchmark's questions are about its corpus: every refusal of one is an in-corpus refusal
            "refused": round(sum(1 for t in rows if t.get("path") == "refused") / len(rows), 4) if rows else None,
            "path_reasons": dict(Counter(c for t in rows if (c := reason_category(t.get("path_reason"))))),
            "verifier": confusion(decisions, correct) if any(d is not None for d in decisions) else None,
        }
    return out


# --------------------------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------------------------


def fmt_score(v: float | None, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def fmt_count(v: float | None) -> str:
    return "–" if v is None else f"{v:,.0f}"


def summary_cells(summary: Mapping[str, Any], metrics: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """The summary table's header and rows: modes; metrics, avg prompt tokens, p50/p95 latency, n, errors."""
    head = [
        "Mode",
        *(metric_label(m) for m in metrics),
        "Avg prompt tokens",
        "Avg completion tokens",
        "p50 latency (s)",
        "p95 latency (s)",
        "n",
        "Errors",
    ]
    rows = [
        [
            mode,
            *(fmt_score(s["metrics"].get(m)) for m in metrics),
            fmt_count(s["prompt_tokens_mean"]),
            fmt_count(s["completion_tokens_mean"]),
            fmt_score(s["latency_s"]["p50"], 2),
            fmt_score(s["latency_s"]["p95"], 2),
            str(s["n"]),
            str(s["errors"]),
        ]
        for mode, s in summary.items()
    ]
    return head, rows


def markdown_table(summary: Mapping[str, Any], metrics: Sequence[str]) -> str:
    """Rows: modes; columns: metrics, avg prompt tokens, p50/p95 latency, n, errors (the paper's Tables 5-8)."""
    head, rows = summary_cells(summary, metrics)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def _verifier_table(summary: Mapping[str, Any]) -> str | None:
    rows = [(m, s["verifier"]) for m, s in summary.items() if s.get("verifier")]
    if not rows:
        return None
    lines = [
        "| Mode | TP (yes, correct) | FP (yes, wrong) | FN (no, correct) | TN (no, wrong) | Precision | Recall | F1 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, v in rows:
        lines.append(
            f"| {mode} | {v['tp']} | {v['fp']} | {v['fn']} | {v['tn']} | {fmt_score(v['precision'])} | "
            f"{fmt_score(v['recall'])} | {fmt_score(v['f1'])} |"
        )
    return "\n".join(lines)


def render_markdown(
    title: str,
    summary: Mapping[str, Any],
    metrics: Sequence[str],
    *,
    primary_metric: str | None = None,
    skipped_rows: Sequence[Sequence[Any]] = (),
    plots: Mapping[str, Path] | None = None,
    run_info: Mapping[str, Any] | None = None,
    question_table: str = "",
    off_topic: Mapping[str, Any] | None = None,
) -> str:
    parts = [f"# {title}", ""]
    if run_info:
        parts += [", ".join(f"{k}: `{v}`" for k, v in run_info.items()), ""]
    parts += [markdown_table(summary, metrics), ""]
    if any("lenient" in m for m in metrics):
        parts += [LENIENT_NOTE, ""]
    if primary_metric:
        parts += [f"Correct = {metric_label(primary_metric)} ≥ 0.5 unless the trace says otherwise.", ""]
    vt = _verifier_table(summary)
    if vt:
        parts += ["## Verifier decision vs answer correctness", "", vt, ""]
    path_rows = [(m, s["paths"]) for m, s in summary.items() if s["paths"]]
    if path_rows:
        parts += ["## Answer paths", "", "| Mode | Path | Questions |", "|---|---|---:|"]
        parts += [f"| {m} | {p} | {n} |" for m, paths in path_rows for p, n in paths.items()]
        parts += [""]
    parts += _refusal_section(summary, off_topic)
    reason_rows = [(m, s["path_reasons"]) for m, s in summary.items() if s.get("path_reasons")]
    if reason_rows:
        parts += ["## Why each path was taken", "", "| Mode | Reason | Questions |", "|---|---|---:|"]
        parts += [
            f"| {m} | {r} | {n} |"
            for m, reasons in reason_rows
            for r, n in sorted(reasons.items(), key=lambda kv: -kv[1])
        ]
        parts += [""]
    if skipped_rows:
        parts += [f"## Skipped dataset rows ({len(skipped_rows)})", ""]
        parts += [f"- `{where}`: {reason}" for where, reason in list(skipped_rows)[:50]]
        if len(skipped_rows) > 50:
            parts.append(f"- … {len(skipped_rows) - 50} more (see report.json)")
        parts += [""]
    if plots:
        parts += ["## Plots", ""] + [f"![{k}]({p.name})" for k, p in plots.items()] + [""]
    if question_table:
        parts += ["## Questions", "", "Every row, with a filter: report.html.", "", question_table, ""]
    return "\n".join(parts)


def _refusal_section(summary: Mapping[str, Any], off_topic: Mapping[str, Any] | None) -> list[str]:
    """Both error rates of the refusal gate: this benchmark's questions refused (per mode) and the held-out
    off-topic questions refused by the run's gate (``off_topic``: :func:`hxd2_ray.runs.refusal_rates`)."""
    gated = ("auto", "auto_post")
    if off_topic and "error" in off_topic:
        gate = f"not measured ({off_topic['error']})"
    elif off_topic:
        gate = (
            f"{off_topic['refused']:.1%} of {off_topic['n']} held-out off-topic questions (rule "
            f"{off_topic['rule']}, threshold {off_topic['threshold']:.4f} from the "
            f"{off_topic['threshold_source']})"
        )
    else:
        gate = "not measured (no index, or the gate is off)"
    rows = [
        f"| {m} | {fmt_score(s.get('refused'), 3)} | {gate if m in gated else '- (no gate in this mode)'} |"
        for m, s in summary.items()
    ]
    return [
        "## Refusals",
        "",
        "| Mode | In-corpus questions refused | Off-topic questions refused |",
        "|---|---:|---|",
        *rows,
        "",
    ]
