"""The report's plots: matplotlib's object API on the Agg canvas (no pyplot state, safe in worker threads)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hxd2_ray.evaluation.report_tables import (
    _is_number,
    metric_label,
    modes_of,
    traces_of_mode,
)

# --------------------------------------------------------------------------------------------------------------
# plots (matplotlib's object API on the Agg canvas: no pyplot state, safe in worker threads)
# --------------------------------------------------------------------------------------------------------------


if TYPE_CHECKING:  # matplotlib loads on the first plot
    from matplotlib.figure import Figure


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
    modes = modes_of(traces)
    series = [[[float(t[k]) for t in traces_of_mode(traces, m) if _is_number(t.get(k))] for m in modes] for k in keys]
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
