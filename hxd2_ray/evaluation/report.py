"""Aggregate per-question traces into a report: Markdown (the paper's table shape), JSON and PNG plots.

A trace is one dict per (question, mode); the keys read here are::

    id                 question id
    mode               row label: a query mode or an ablation setting ("hybrid", "logic", "llm-only", ...)
    path               which stage produced the answer ("logic_form", "dual_level", "fallback", ...), optional
    scores             {metric: float} as ``datasets.score_item`` returns them (flat numeric keys named in
                       ``metrics=`` are read too)
    correct            bool, optional; else derived: primary score >= 0.5 (so 0/1 metrics need a 1)
    latency_s          float, optional
    prompt_tokens      int, optional (summed over the question's LLM calls)
    completion_tokens  int, optional
    verifier           the pre-check decision: True/False or "yes"/"no" (any case, "YES ..." prefixes), optional
    error              non-empty when the question failed; it is still scored (0) and counted as an error

Rows are modes in order of first appearance. Latency percentiles use linear interpolation (numpy's default).
The verifier confusion matrix crosses the decision with correctness: TP = yes & correct, FP = yes & wrong,
FN = no & correct, TN = no & wrong (precision = TP/(TP+FP): how often a "yes" was right).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hxd2_ray.evaluation.question_table import markdown_question_table, question_rows, render_html

if TYPE_CHECKING:  # matplotlib loads on the first plot
    from matplotlib.figure import Figure

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


def _mean(values: Sequence[float]) -> float | None:
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


def _modes(traces: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(str(t.get("mode") or "default") for t in traces))


def _of_mode(traces: Sequence[Mapping[str, Any]], mode: str) -> list[Mapping[str, Any]]:
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
    for mode in _modes(traces):
        rows = _of_mode(traces, mode)
        per_metric: dict[str, float | None] = {}
        for m in metrics:
            vals = [s[m] for t in rows if m in (s := trace_scores(t, (m,)))]
            per_metric[m] = _mean(vals)
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
            "latency_s": {"p50": percentile(lat, 50), "p95": percentile(lat, 95), "mean": _mean(lat)},
            "prompt_tokens_mean": _mean(ptok),
            "completion_tokens_mean": _mean(ctok),
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


# --------------------------------------------------------------------------------------------------------------
# plots (matplotlib's object API on the Agg canvas: no pyplot state, safe in worker threads)
# --------------------------------------------------------------------------------------------------------------


def new_figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def plot_scores(summary: Mapping[str, Any], metrics: Sequence[str], path: Path) -> Path:
    """Bars of each metric by mode on a 0-1 axis; a metric a mode has no value for is marked "n/a", not drawn
    as a zero."""
    modes = list(summary)
    fig = new_figure(max(5.0, 1.2 * len(modes) * max(1, len(metrics)) / 2 + 2), 4.4)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / max(1, len(metrics))
    for j, m in enumerate(metrics):
        vals = [summary[mode]["metrics"].get(m) for mode in modes]
        xs = [i + (j - (len(metrics) - 1) / 2) * width for i in range(len(modes))]
        drawn = [(x, v) for x, v in zip(xs, vals) if v is not None]
        bars = ax.bar(
            [x for x, _ in drawn],
            [v for _, v in drawn],
            width,
            label=metric_label(m),
            hatch="//" if "lenient" in m else None,
        )
        for b, (_, v) in zip(bars, drawn):
            ax.annotate(f"{v:.3f}", (b.get_x() + b.get_width() / 2, min(v, 0.97)), ha="center", va="bottom", fontsize=8)
        for x, v in zip(xs, vals):
            if v is None:
                ax.annotate("n/a", (x, 0.01), ha="center", va="bottom", fontsize=8, color="grey")
    ax.set_xticks(range(len(modes)), modes)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mode")
    ax.set_ylabel("score (0-1)")
    ax.set_title("Score by mode")
    if metrics:  # under the axis, so it never hides a bar
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=min(4, len(metrics)))
    return save_figure(fig, path)


def _box(
    traces: Sequence[Mapping[str, Any]], keys: Sequence[str], titles: Sequence[str], ylabel: str, path: Path
) -> Path | None:
    modes = _modes(traces)
    series = [[[float(t[k]) for t in _of_mode(traces, m) if _is_number(t.get(k))] for m in modes] for k in keys]
    if not any(v for s in series for v in s):
        return None
    fig = new_figure(max(5.0, 1.3 * len(modes) * len(keys) + 1), 4)
    for i, (data, title) in enumerate(zip(series, titles), 1):
        ax = fig.add_subplot(1, len(keys), i)
        ax.boxplot([d if d else [float("nan")] for d in data], showfliers=True)
        ax.set_xticks(range(1, len(modes) + 1), modes)
        ax.set_title(title)
        ax.set_xlabel("mode")
        ax.set_ylabel(ylabel)
    return save_figure(fig, path)


def plot_latency(traces: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    return _box(traces, ["latency_s"], ["Latency per question"], "seconds", path)


def plot_tokens(traces: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    return _box(
        traces,
        ["prompt_tokens", "completion_tokens"],
        ["Prompt tokens", "Completion tokens"],
        "tokens per question",
        path,
    )


def plot_verifier_confusion(summary: Mapping[str, Any], path: Path) -> Path | None:
    rows = [(m, s["verifier"]) for m, s in summary.items() if s.get("verifier")]
    if not rows:
        return None
    fig = new_figure(3.6 * len(rows), 3.4)
    for i, (mode, v) in enumerate(rows, 1):
        ax = fig.add_subplot(1, len(rows), i)
        grid = [[v["tp"], v["fp"]], [v["fn"], v["tn"]]]
        top = max(1, max(max(r) for r in grid))
        ax.imshow(grid, cmap="Blues", vmin=0, vmax=top)
        for r in range(2):
            for c in range(2):
                ax.text(
                    c,
                    r,
                    str(grid[r][c]),
                    ha="center",
                    va="center",
                    fontsize=12,
                    color="white" if grid[r][c] > top / 2 else "black",
                )
        ax.set_xticks([0, 1], ["correct", "incorrect"])
        ax.set_yticks([0, 1], ["verifier yes", "verifier no"])
        ax.set_xlabel("answer")
        ax.set_ylabel("verifier decision")
        ax.set_title(mode)
    return save_figure(fig, path)


# --------------------------------------------------------------------------------------------------------------
# write / compare
# --------------------------------------------------------------------------------------------------------------


def write_report(
    traces: Sequence[Mapping[str, Any]],
    out_dir: str | Path,
    title: str = "Evaluation",
    *,
    metrics: Sequence[str] | None = None,
    primary_metric: str | None = None,
    skipped_rows: Sequence[Sequence[Any]] = (),
    run_info: Mapping[str, Any] | None = None,
    plots: bool = True,
    questions: Mapping[str, Mapping[str, Any]] | None = None,
    off_topic: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Write ``report.md``, ``report.html``, ``report.json`` and the PNG plots into ``out_dir``; return their paths
    by name (``markdown``, ``html``, ``json``, ``score_by_mode``, ``latency``, ``tokens``, ``verifier_confusion``;
    a plot with no data is left out). ``questions`` (id -> {question, answers}) fills the per-question table's
    question and gold columns; ``off_topic``: the gate's refusals of held-out off-topic questions."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    traces = list(traces)
    primary = primary_metric or infer_primary_metric(traces)
    if metrics is None:
        metrics = list(dict.fromkeys(k for t in traces for k in trace_scores(t)))
    summary = aggregate(traces, metrics, primary)
    paths: dict[str, Path] = {}
    if plots and traces:
        shown = [m for m in metrics if m != "parsed"][:4]
        paths["score_by_mode"] = plot_scores(summary, shown, out / "score_by_mode.png")
        for name, made in (
            ("latency", plot_latency(traces, out / "latency.png")),
            ("tokens", plot_tokens(traces, out / "tokens.png")),
            ("verifier_confusion", plot_verifier_confusion(summary, out / "verifier_confusion.png")),
        ):
            if made is not None:
                paths[name] = made
    rows = question_rows(traces, questions or {}, [is_correct(t, primary) for t in traces])
    md = render_markdown(
        title,
        summary,
        metrics,
        primary_metric=primary,
        skipped_rows=skipped_rows,
        plots=dict(paths),
        run_info=run_info,
        question_table=markdown_question_table(rows),
        off_topic=off_topic,
    )
    (out / "report.md").write_text(md, encoding="utf-8")
    head, cells = summary_cells(summary, metrics)
    notes = [", ".join(f"{k}: {v}" for k, v in (run_info or {}).items())] if run_info else []
    page = render_html(title, head, cells, rows, plots=[p.name for p in paths.values()], notes=notes)
    (out / "report.html").write_text(page, encoding="utf-8")
    doc = {
        "title": title,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "run_info": dict(run_info or {}),
        "n_traces": len(traces),
        "primary_metric": primary,
        "metrics": list(metrics),
        "lenient_metrics": [m for m in metrics if "lenient" in m],
        "modes": summary,
        "skipped_rows": [list(s) for s in skipped_rows],
        "plots": {k: p.name for k, p in paths.items()},
        "off_topic_refusals": dict(off_topic) if off_topic else None,
    }
    (out / "report.json").write_text(json.dumps(doc, ensure_ascii=False, indent=2), encoding="utf-8")
    return {"markdown": out / "report.md", "html": out / "report.html", "json": out / "report.json", **paths}


@dataclass
class RunComparison:
    metric: str | None
    keyed_by: str  # "id+mode" or "id"
    rows: list[dict[str, Any]] = field(default_factory=list)  # questions whose score or correctness changed
    summary: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "keyed_by": self.keyed_by, "summary": self.summary, "rows": self.rows}

    def to_markdown(self, label_a: str = "A", label_b: str = "B", limit: int = 100) -> str:
        s = self.summary
        lines = [
            f"Compared {s['paired']} questions on {metric_label(self.metric or '?')} (keyed by {self.keyed_by}):"
            f" {s['fixed']} fixed, {s['broken']} broken, {s['score_changed']} score changes, "
            f"mean delta {fmt_score(s['mean_delta'])}; only in {label_a}: {s['only_in_a']}, only in {label_b}: "
            f"{s['only_in_b']}.",
            "",
            f"| Question | Mode | {label_a} | {label_b} | Delta | Change |",
            "|---|---|---:|---:|---:|---|",
        ]
        for r in self.rows[:limit]:
            lines.append(
                f"| {r['id']} | {r['mode']} | {fmt_score(r['score_a'])} | {fmt_score(r['score_b'])} | "
                f"{fmt_score(r['delta'])} | {r['change']} |"
            )
        if len(self.rows) > limit:
            lines.append(f"| … {len(self.rows) - limit} more | | | | | |")
        return "\n".join(lines)


def compare_runs(
    traces_a: Sequence[Mapping[str, Any]], traces_b: Sequence[Mapping[str, Any]], metric: str | None = None
) -> RunComparison:
    """Per-question differences between two runs.

    Traces pair on (id, mode) when the runs share a mode, else on id alone (an A/B of two modes or configs).
    ``rows`` lists the paired questions whose correctness or score changed, fixed/broken first, then by the
    size of the delta; ``change`` is ``fixed`` (wrong in A, right in B), ``broken``, or ``score``.
    """
    metric = metric or infer_primary_metric(list(traces_a) + list(traces_b))
    shared = set(_modes(traces_a)) & set(_modes(traces_b))
    keyed_by = "id+mode" if shared else "id"

    def key(t: Mapping[str, Any]) -> tuple[str, str]:
        return (str(t.get("id")), str(t.get("mode") or "default") if shared else "")

    a = {key(t): t for t in traces_a}
    b = {key(t): t for t in traces_b}
    rows: list[dict[str, Any]] = []
    deltas: list[float] = []
    fixed = broken = changed = 0
    for k in [k for k in a if k in b]:
        ta, tb = a[k], b[k]
        sa = trace_scores(ta, (metric,) if metric else ()).get(metric) if metric else None
        sb = trace_scores(tb, (metric,) if metric else ()).get(metric) if metric else None
        ca, cb = is_correct(ta, metric), is_correct(tb, metric)
        delta = sb - sa if sa is not None and sb is not None else None
        if delta is not None:
            deltas.append(delta)
        if ca is False and cb is True:
            change, fixed = "fixed", fixed + 1
        elif ca is True and cb is False:
            change, broken = "broken", broken + 1
        elif delta:
            change, changed = "score", changed + 1
        else:
            continue
        rows.append(
            {
                "id": k[0],
                "mode": k[1] or f"{ta.get('mode') or 'default'} → {tb.get('mode') or 'default'}",
                "score_a": sa,
                "score_b": sb,
                "delta": delta,
                "correct_a": ca,
                "correct_b": cb,
                "change": change,
                "answer_a": ta.get("answer"),
                "answer_b": tb.get("answer"),
            }
        )
    order = {"fixed": 0, "broken": 1, "score": 2}
    rows.sort(key=lambda r: (order[r["change"]], -abs(r["delta"] or 0.0), r["id"]))
    summary = {
        "paired": sum(1 for k in a if k in b),
        "fixed": fixed,
        "broken": broken,
        "score_changed": changed,
        "mean_delta": _mean(deltas),
        "only_in_a": sum(1 for k in a if k not in b),
        "only_in_b": sum(1 for k in b if k not in a),
    }
    return RunComparison(metric=metric, keyed_by=keyed_by, rows=rows, summary=summary)
