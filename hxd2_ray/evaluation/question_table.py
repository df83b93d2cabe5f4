"""Per-question results of an evaluation run: one row per (question, mode), in ``report.md`` and ``report.html``.

A summary says how often a mode was right; the rows say where and why it was wrong: the question, its gold
answers, the answer given, whether it counted as a hit, the path that produced it, its latency and the
references it cited. ``report.md`` carries the first rows of each mode (a Markdown table of thousands of rows
is unreadable); ``report.html`` carries every row, self-contained (no script or style from outside), with a
filter box.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

MARKDOWN_ROWS_PER_MODE = 50
_ANSWER_CHARS = 160  # a Markdown cell is one line: long answers are cut there (whole in report.html)


def question_rows(
    traces: Sequence[Mapping[str, Any]], questions: Mapping[str, Mapping[str, Any]], correct: Sequence[bool | None]
) -> list[dict[str, Any]]:
    """The rows of the per-question table; ``correct[i]`` is whether ``traces[i]`` counted as a hit."""
    rows = []
    for trace, hit in zip(traces, correct, strict=True):
        qid = str(trace.get("id"))
        asked = questions.get(qid, {})
        latency = trace.get("latency_s")
        rows.append(
            {
                "id": qid,
                "mode": str(trace.get("mode") or "default"),
                "question": str(asked.get("question") or ""),
                "gold": [str(a) for a in asked.get("answers") or ()],
                "answer": str(trace.get("answer") or ""),
                "hit": hit,
                "path": str(trace.get("path") or ""),
                "latency_s": float(latency) if isinstance(latency, (int, float)) else None,
                "references": [str(r) for r in _references(trace)],
                "error": str(trace.get("error") or ""),
            }
        )
    return rows


def _references(trace: Mapping[str, Any]) -> list[Any]:
    refs = trace.get("evidence_ids")
    if isinstance(refs, str):  # traces read back from parquet may carry the list as JSON text
        try:
            refs = json.loads(refs)
        except ValueError:
            refs = [refs]
    return list(refs or [])


def _hit_mark(hit: bool | None) -> str:
    return "–" if hit is None else ("✓" if hit else "✗")


def _latency(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _md_cell(text: str, limit: int = _ANSWER_CHARS) -> str:
    flat = " ".join(text.split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return flat.replace("|", "\\|") or "–"


def markdown_question_table(rows: Sequence[Mapping[str, Any]], limit: int = MARKDOWN_ROWS_PER_MODE) -> str:
    """The first ``limit`` rows of each mode as a Markdown table, with a line naming what was left out."""
    shown: list[Mapping[str, Any]] = []
    left_out = 0
    per_mode: dict[str, int] = {}
    for row in rows:
        per_mode[row["mode"]] = per_mode.get(row["mode"], 0) + 1
        if per_mode[row["mode"]] <= limit:
            shown.append(row)
        else:
            left_out += 1
    lines = [
        "| Question | Mode | Gold | Answer | Hit | Path | Latency (s) | References |",
        "|---|---|---|---|:-:|---|---:|---|",
    ]
    for r in shown:
        answer = r["answer"] if not r["error"] else f"error: {r['error']}"
        lines.append(
            f"| {_md_cell(r['id'] + ': ' + r['question'] if r['question'] else r['id'])} | {r['mode']} | "
            f"{_md_cell('; '.join(r['gold']))} | {_md_cell(answer)} | {_hit_mark(r['hit'])} | "
            f"{_md_cell(r['path'], 40)} | {_latency(r['latency_s'])} | {_md_cell(', '.join(r['references']), 120)} |"
        )
    if left_out:
        lines += ["", f"{left_out} more rows (past the first {limit} of each mode) are in report.html and the traces."]
    return "\n".join(lines)


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #222; }
table { border-collapse: collapse; margin: 12px 0 24px; }
th, td { border: 1px solid #ddd; padding: 4px 8px; vertical-align: top; text-align: left; }
th { background: #f4f4f4; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.text { max-width: 36em; white-space: pre-wrap; }
tr.hit td.mark { color: #1a7f37; } tr.miss td.mark { color: #cf222e; }
img { max-width: 100%; border: 1px solid #eee; margin: 8px 0; }
input { font: inherit; padding: 4px 8px; width: 24em; }
"""

_FILTER = """
const box = document.getElementById("filter");
box.addEventListener("input", () => {
  const words = box.value.toLowerCase().split(/\\s+/).filter(Boolean);
  for (const row of document.querySelectorAll("#questions tbody tr")) {
    const text = row.textContent.toLowerCase();
    row.hidden = !words.every((w) => text.includes(w));
  }
});
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def render_html(
    title: str,
    summary_head: Sequence[str],
    summary_rows: Sequence[Sequence[str]],
    rows: Sequence[Mapping[str, Any]],
    plots: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> str:
    """A self-contained HTML report: the summary table, the plots (files beside it) and every question's row."""
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
    ]
    parts += [f"<p>{_e(n)}</p>" for n in notes]
    parts.append("<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in summary_head) + "</tr></thead><tbody>")
    for cells in summary_rows:
        parts.append(
            "<tr>" + "".join(f'<td class="{"num" if i else ""}">{_e(c)}</td>' for i, c in enumerate(cells)) + "</tr>"
        )
    parts.append("</tbody></table>")
    parts += [f'<img src="{_e(p)}" alt="{_e(p)}">' for p in plots]
    parts += [
        f"<h2>Questions ({len(rows)})</h2>",
        '<input id="filter" type="search" placeholder="filter: words in any column (e.g. a mode, ✗)">',
        '<table id="questions"><thead><tr><th>Id</th><th>Mode</th><th>Question</th><th>Gold</th>'
        "<th>Answer</th><th>Hit</th><th>Path</th><th>Latency (s)</th><th>References</th></tr></thead><tbody>",
    ]
    for r in rows:
        css = "" if r["hit"] is None else ("hit" if r["hit"] else "miss")
        answer = r["answer"] if not r["error"] else f"error: {r['error']}"
        parts.append(
            f'<tr class="{css}"><td>{_e(r["id"])}</td><td>{_e(r["mode"])}</td>'
            f'<td class="text">{_e(r["question"])}</td><td class="text">{_e("; ".join(r["gold"]))}</td>'
            f'<td class="text">{_e(answer)}</td><td class="mark">{_hit_mark(r["hit"])}</td><td>{_e(r["path"])}</td>'
            f'<td class="num">{_latency(r["latency_s"])}</td><td class="text">{_e(", ".join(r["references"]))}</td>'
            "</tr>"
        )
    parts += ["</tbody></table>", f"<script>{_FILTER}</script>", "</body></html>"]
    return "\n".join(parts)
