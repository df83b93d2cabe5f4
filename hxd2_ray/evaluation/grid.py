"""Ablation grids: index variants x config axes x modes, one evaluation run per cell, one comparison table.

The paper's tables compare retrieval setups (LLM only, dual-level, logic form, the multi-stage pipeline) under
loop-NER variants and context budgets. Here a grid is:

* **index variants**: ``LABEL=PATH`` indexes of the same corpus built differently (loop-NER: ``hxd2 index
  --set extraction.loop_ner=... --set extraction.max_gleaning=N``). Each variant's extraction settings are read
  from its manifest and shown in the table, so a label cannot misdescribe what was built.
* **axes**: ``KEY=V1,V2`` config settings applied at query time (context budgets:
  ``retrieval.chunk_budget_tokens=2000,8000``); every combination is a cell.
* **modes**: answered in every cell; ``llm_only`` uses neither the index nor the retrieval settings, so it is
  answered once, in a cell of its own.

This module plans cells and builds the table, JSON and plot from the cells' summaries; it runs nothing (the
job in ``jobs/evaluate.py`` runs each cell as an ordinary, resumable evaluation run).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hxd2_ray.errors import HxdError
from hxd2_ray.evaluation.report_plots import new_figure, save_figure
from hxd2_ray.evaluation.report_tables import LENIENT_NOTE, fmt_count, fmt_score, metric_label

# Row titles in the paper's vocabulary; a mode missing here is shown by its own name.
MODE_TITLES = {
    "llm_only": "LLM only",
    "dual": "Dual-level",
    "logic": "Logic form",
    "auto": "Multi-stage (pre-check)",
    "auto_post": "Multi-stage (post-check)",
    "chunk_vector": "Chunk vectors (retrieval only)",
    "dual_retrieval": "Dual-level (retrieval only)",
}
# Modes whose answers may come from the dual-level fallback; the table shows how often they did.
FALLBACK_MODES = ("auto", "auto_post")
# Extraction settings that tell loop-NER variants apart (from the index manifest's config).
EXTRACTION_KEYS = ("loop_ner", "max_gleaning")
LLM_ONLY_CELL = "llm_only"


class GridError(HxdError):
    """A grid specification that cannot be run (malformed axis or index variant, clashing labels)."""


@dataclass(frozen=True)
class Axis:
    key: str  # a config path, as in --set (e.g. retrieval.chunk_budget_tokens)
    values: tuple[str, ...]  # YAML scalars, as in --set


@dataclass(frozen=True)
class IndexVariant:
    label: str
    location: str  # folder or s3:// URI


@dataclass(frozen=True)
class GridCell:
    name: str  # folder name under <output>/cells
    modes: tuple[str, ...]
    index: IndexVariant | None = None  # None: the llm_only cell
    settings: tuple[tuple[str, str], ...] = ()  # (axis key, value) of this cell

    @property
    def overrides(self) -> list[str]:
        return [f"{key}={value}" for key, value in self.settings]


def parse_axis(text: str) -> Axis:
    """``KEY=V1,V2,...`` -> Axis. Values are kept as text; the config loader parses them like ``--set``."""
    key, sep, rest = text.partition("=")
    key = key.strip()
    values = tuple(v.strip() for v in rest.split(",")) if sep else ()
    if not key or not sep or not values or any(not v for v in values):
        raise GridError(
            f"axis {text!r} must look like SECTION.KEY=V1,V2 (e.g. retrieval.chunk_budget_tokens=2000,8000)"
        )
    if "." not in key:
        raise GridError(f"axis key {key!r} must name a config section and key, e.g. retrieval.chunk_budget_tokens")
    if len(set(values)) != len(values):
        raise GridError(f"axis {key} repeats a value: {', '.join(values)}")
    return Axis(key, values)


def parse_index_variant(text: str) -> IndexVariant:
    """``LABEL=PATH`` or a bare ``PATH`` (labelled by its last path component)."""
    label, sep, location = text.partition("=")
    if sep and label and "/" not in label and ":" not in label:
        label, location = label.strip(), location.strip()
    else:
        location = text.strip()
        label = location.rstrip("/").rsplit("/", 1)[-1]
    if not label or not location:
        raise GridError(f"index variant {text!r} must look like LABEL=PATH (or a bare PATH)")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", label):
        raise GridError(f"index label {label!r} may hold only letters, digits, '.', '_' and '-'")
    return IndexVariant(label, location)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "-", text).strip("-")


def cell_name(index: IndexVariant, settings: Sequence[tuple[str, str]]) -> str:
    parts = [index.label] + [f"{key.rsplit('.', 1)[-1]}={value}" for key, value in settings]
    return _slug("__".join(parts))


def plan_cells(indexes: Sequence[IndexVariant], axes: Sequence[Axis], modes: Sequence[str]) -> list[GridCell]:
    """Every (index variant, axis combination) as a cell answering the retrieval modes, plus one ``llm_only``
    cell when that mode is asked for."""
    modes = list(dict.fromkeys(modes))
    if not modes:
        raise GridError("a grid needs at least one --mode")
    labels = [ix.label for ix in indexes]
    if len(set(labels)) != len(labels):
        raise GridError(f"index labels must differ: {', '.join(labels)}")
    keys = [a.key for a in axes]
    if len(set(keys)) != len(keys):
        raise GridError(f"an axis is given twice: {', '.join(keys)}")
    retrieval_modes = tuple(m for m in modes if m != "llm_only")
    if retrieval_modes and not indexes:
        raise GridError(f"modes {', '.join(retrieval_modes)} need at least one --index")
    cells = [GridCell(LLM_ONLY_CELL, ("llm_only",))] if "llm_only" in modes else []
    if retrieval_modes:
        for index in indexes:
            for combo in itertools.product(*(a.values for a in axes)):
                settings = tuple(zip(keys, combo))
                cells.append(GridCell(cell_name(index, settings), retrieval_modes, index, settings))
    names = [c.name for c in cells]
    if len(set(names)) != len(names):
        raise GridError(f"two cells would share a folder name: {names}")
    return cells


def describe_extraction(manifest_config: Mapping[str, Any] | None) -> str:
    """``loop_ner=base, max_gleaning=1`` from an index manifest's config ('' when it does not say)."""
    extraction = (manifest_config or {}).get("extraction") or {}
    return ", ".join(f"{k}={extraction[k]}" for k in EXTRACTION_KEYS if k in extraction)


def fallback_rate(mode: str, per_mode: Mapping[str, Any]) -> float | None:
    """Share of a multi-stage mode's questions answered by the dual-level fallback (None for other modes)."""
    n = per_mode.get("n") or 0
    if mode not in FALLBACK_MODES or not n:
        return None
    return (per_mode.get("paths") or {}).get("dual_level", 0) / n


def grid_rows(
    cells: Sequence[GridCell], summaries: Mapping[str, Mapping[str, Any]], index_info: Mapping[str, str]
) -> list[dict[str, Any]]:
    """One row per (cell, mode), in cell order then the modes' order: the table's rows."""
    rows = []
    for cell in cells:
        summary = summaries.get(cell.name)
        if not summary:
            continue
        for mode in cell.modes:
            s = (summary.get("per_mode") or {}).get(mode)
            if s is None:
                continue
            rows.append(
                {
                    "method": MODE_TITLES.get(mode, mode),
                    "mode": mode,
                    "cell": cell.name,
                    "index": cell.index.label if cell.index else None,
                    "extraction": index_info.get(cell.index.label, "") if cell.index else "",
                    "settings": dict(cell.settings),
                    "n": s["n"],
                    "errors": s["errors"],
                    "metrics": dict(s["metrics"]),
                    "fallback_rate": fallback_rate(mode, s),
                    "latency_p50_s": s["latency_s"]["p50"],
                    "prompt_tokens_mean": s["prompt_tokens_mean"],
                    "completion_tokens_mean": s["completion_tokens_mean"],
                }
            )
    return rows


def row_label(row: Mapping[str, Any]) -> str:
    parts = [row["method"]]
    if row["index"]:
        parts.append(row["index"])
    parts += [f"{k.rsplit('.', 1)[-1]}={v}" for k, v in row["settings"].items()]
    return " · ".join(parts)


def _best(rows: Sequence[Mapping[str, Any]], metric: str) -> float | None:
    values = [r["metrics"].get(metric) for r in rows if r["metrics"].get(metric) is not None]
    return max(values) if values else None


def markdown_grid(
    title: str,
    rows: Sequence[Mapping[str, Any]],
    metrics: Sequence[str],
    axes: Sequence[Axis],
    primary_metric: str | None,
    notes: Sequence[str] = (),
) -> str:
    """Rows: method x index variant x axis values; columns: metrics, fallback, latency, tokens (the shape of the
    paper's ablation tables). The best score of each metric is bold."""
    has_index = any(r["index"] for r in rows)
    head = [
        "Method",
        *(["Index", "Loop-NER"] if has_index else []),
        *(a.key for a in axes),
        *(metric_label(m) for m in metrics),
        "Fallback",
        "p50 latency (s)",
        "Avg prompt tokens",
        "n",
        "Errors",
    ]
    lines = [f"# {title}", ""]
    lines += list(notes) + ([""] if notes else [])
    lines += [
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---"] * (1 + (2 if has_index else 0) + len(axes)) + ["---:"] * (len(metrics) + 5)) + "|",
    ]
    best = {m: _best(rows, m) for m in metrics}
    for r in rows:
        scores = []
        for m in metrics:
            v = r["metrics"].get(m)
            text = fmt_score(v)
            scores.append(f"**{text}**" if v is not None and v == best[m] and len(rows) > 1 else text)
        cells = [
            r["method"],
            *([r["index"] or "–", r["extraction"] or "–"] if has_index else []),
            *(r["settings"].get(a.key, "–") for a in axes),
            *scores,
            "–" if r["fallback_rate"] is None else f"{r['fallback_rate']:.0%}",
            fmt_score(r["latency_p50_s"], 2),
            fmt_count(r["prompt_tokens_mean"]),
            str(r["n"]),
            str(r["errors"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if primary_metric:
        lines += [
            "",
            f"Primary metric: {metric_label(primary_metric)}. Fallback: share of a multi-stage mode's "
            "questions answered by the dual-level fallback.",
        ]
    if any("lenient" in m for m in metrics):
        lines += ["", LENIENT_NOTE]
    return "\n".join(lines) + "\n"


def plot_grid(rows: Sequence[Mapping[str, Any]], metric: str, path: Path) -> Path:
    """Horizontal bars of ``metric`` per row, best on top."""
    ordered = sorted(rows, key=lambda r: r["metrics"].get(metric) or 0.0)
    fig = new_figure(8.0, max(2.5, 0.42 * len(ordered) + 1.2))
    ax = fig.add_subplot(1, 1, 1)
    values = [r["metrics"].get(metric) or 0.0 for r in ordered]
    bars = ax.barh(range(len(ordered)), values, color="#4878a8")
    for b, v in zip(bars, values):
        ax.annotate(
            f"{v:.3f}",
            (v, b.get_y() + b.get_height() / 2),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    ax.set_yticks(range(len(ordered)), [row_label(r) for r in ordered], fontsize=8)
    ax.set_xlim(0, max(1.0, max(values, default=0.0) * 1.15))
    ax.set_xlabel(metric_label(metric))
    ax.set_title(f"{metric_label(metric)} by setup")
    return save_figure(fig, path)


def write_grid(
    out_dir: str | Path,
    *,
    benchmark: str,
    questions: int,
    cells: Sequence[GridCell],
    summaries: Mapping[str, Mapping[str, Any]],
    index_info: Mapping[str, str],
    axes: Sequence[Axis],
    metrics: Sequence[str],
    primary_metric: str | None,
) -> dict[str, Path]:
    """``grid.md``, ``grid.json`` and ``grid.png`` (the primary metric) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = grid_rows(cells, summaries, index_info)
    shown = [m for m in metrics if m != "parsed"]
    notes = [
        f"{questions} questions per cell; cells in `cells/`, each an ordinary run folder "
        "(`hxd2 eval report`/`compare` work on them)."
    ]
    notes += [f"- index `{label}`: {info or 'extraction settings not recorded'}" for label, info in index_info.items()]
    md = markdown_grid(f"Grid: {benchmark}", rows, shown, axes, primary_metric, notes)
    (out / "grid.md").write_text(md, encoding="utf-8")
    doc = {
        "benchmark": benchmark,
        "questions": questions,
        "primary_metric": primary_metric,
        "metrics": list(metrics),
        "axes": [{"key": a.key, "values": list(a.values)} for a in axes],
        "indexes": {label: info for label, info in index_info.items()},
        "cells": [
            {
                "name": c.name,
                "modes": list(c.modes),
                "index": c.index.location if c.index else None,
                "settings": dict(c.settings),
            }
            for c in cells
        ],
        "rows": rows,
    }
    (out / "grid.json").write_text(json.dumps(doc, ensure_ascii=False, indent=2, default=str), encoding="utf-8")
    paths = {"markdown": out / "grid.md", "json": out / "grid.json"}
    metric = primary_metric or (shown[0] if shown else None)
    if rows and metric:
        paths["plot"] = plot_grid(rows, metric, out / "grid.png")
    return paths
