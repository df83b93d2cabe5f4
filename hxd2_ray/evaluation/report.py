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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hxd2_ray.evaluation.question_table import markdown_question_table, question_rows, render_html
from hxd2_ray.evaluation.report_plots import (
    new_figure,
    plot_latency,
    plot_scores,
    plot_tokens,
    plot_verifier_confusion,
    save_figure,
)
from hxd2_ray.evaluation.report_tables import (
    LENIENT_NOTE,
    METRIC_LABELS,
    PRIMARY_PREFERENCE,
    aggregate,
    confusion,
    fmt_count,
    fmt_score,
    infer_primary_metric,
    is_correct,
    markdown_table,
    mean_or_none,
    metric_label,
    modes_of,
    percentile,
    reason_category,
    render_markdown,
    summary_cells,
    trace_scores,
    verifier_decision,
)

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
    shared = set(modes_of(traces_a)) & set(modes_of(traces_b))
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
        "mean_delta": mean_or_none(deltas),
        "only_in_a": sum(1 for k in a if k not in b),
        "only_in_b": sum(1 for k in b if k not in a),
    }
    return RunComparison(metric=metric, keyed_by=keyed_by, rows=rows, summary=summary)


__all__ = [
    "LENIENT_NOTE",
    "METRIC_LABELS",
    "PRIMARY_PREFERENCE",
    "RunComparison",
    "aggregate",
    "compare_runs",
    "confusion",
    "fmt_count",
    "fmt_score",
    "infer_primary_metric",
    "is_correct",
    "markdown_table",
    "metric_label",
    "new_figure",
    "percentile",
    "plot_latency",
    "plot_scores",
    "plot_tokens",
    "plot_verifier_confusion",
    "reason_category",
    "render_markdown",
    "save_figure",
    "summary_cells",
    "trace_scores",
    "verifier_decision",
    "write_report",
]
