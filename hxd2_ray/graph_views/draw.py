"""A subgraph as a PNG (matplotlib, networkx layout): names on the nodes, relation keywords on the edges.

Legibility rules: node size grows with the entity's degree, colour is its type (legend; the 12 most frequent
types get a colour each, the rest share grey as "other"), the centre is ringed; names are cut to 28 characters
on a light box; edges are labelled with their first keyword, strongest first, skipping a label that would
overlap one already placed or a name (so labels never pile up around a hub); the layout is Kamada-Kawai (even
spacing) for a connected picture, else a seeded spring layout, so the same graph draws the same way.
"""

from __future__ import annotations

import math
import os
from typing import Any

import networkx as nx
import numpy as np

from hxd2_ray.graph_views.subgraph import Subgraph

MAX_EDGE_LABELS = 60
_PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#17becf",
    "#8c564b",
    "#bcbd22",
)
OTHER_COLOUR = "#c8c8c8"


def short(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def to_networkx(sub: Subgraph) -> nx.Graph[str]:
    graph: nx.Graph[str] = nx.Graph()
    for key, ent in sub.entities.items():
        graph.add_node(
            key,
            name=ent["name"],
            type=ent["type"] or "unknown",
            degree=int(ent["degree"]),
            description=ent["description"],
        )
    for e in sub.edges:
        graph.add_edge(
            e["source_key"],
            e["target_key"],
            keywords=list(e["keywords"] or []),
            description=e["description"],
            weight=float(e["weight"]),
        )
    return graph


def layout(graph: nx.Graph[str]) -> dict[str, tuple[float, float]]:
    if graph.number_of_nodes() == 0:
        return {}
    if graph.number_of_nodes() == 1:
        return {next(iter(graph.nodes)): (0.0, 0.0)}
    try:
        # Kamada-Kawai needs a connected graph for its distances; components are laid out side by side.
        pos = (
            nx.kamada_kawai_layout(graph)
            if nx.is_connected(graph)
            else nx.spring_layout(graph, seed=7, k=1.6 / math.sqrt(graph.number_of_nodes()), iterations=300)
        )
    except ImportError:  # scipy missing
        pos = nx.spring_layout(graph, seed=7, k=1.6 / math.sqrt(graph.number_of_nodes()), iterations=300)
    return _spread({k: (float(x), float(y)) for k, (x, y) in pos.items()})


def _spread(pos: dict[str, tuple[float, float]], rounds: int = 200) -> dict[str, tuple[float, float]]:
    """Push apart nodes that sit closer than a disc's width (a hub's ring of leaves piles up in force layouts)."""
    keys = list(pos)
    xy = np.array([pos[k] for k in keys], dtype=float)
    span = float(np.ptp(xy, axis=0).max()) or 1.0
    xy = (xy - xy.mean(axis=0)) / span  # extent ~1
    min_dist = min(0.12, 0.55 / math.sqrt(len(keys)))
    for _ in range(rounds):
        delta = xy[:, None, :] - xy[None, :, :]
        dist = np.sqrt((delta**2).sum(axis=2)) + np.eye(len(keys))
        close = dist < min_dist
        if not close.any():
            break
        push = np.where(close[..., None], delta / dist[..., None] * (min_dist - dist)[..., None] * 0.5, 0.0)
        xy += push.sum(axis=1)
    return {k: (float(x), float(y)) for k, (x, y) in zip(keys, xy, strict=True)}


def type_colours(sub: Subgraph) -> dict[str, str]:
    counts: dict[str, int] = {}
    for ent in sub.entities.values():
        t = ent["type"] or "unknown"
        counts[t] = counts.get(t, 0) + 1
    ordered = sorted(counts, key=lambda t: (-counts[t], t))
    return {t: _PALETTE[i] if i < len(_PALETTE) else OTHER_COLOUR for i, t in enumerate(ordered)}


def _boxes_overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return not (a[2] < b[0] or b[2] < a[0] or a[3] < b[1] or b[3] < a[1])


# Where along an edge its label may sit (fraction from one end), in order of preference.
_LABEL_SPOTS = (0.5, 0.38, 0.62, 0.28, 0.72)


def _free_labels(
    candidates: list[tuple[Any, str, tuple[float, float], tuple[float, float]]],
    taken: list[tuple[float, float, float, float]],
    font_px: float,
) -> list[tuple[Any, str, float]]:
    """Greedy, strongest edge first: the first spot along each edge (display points ``a`` to ``b``) where the
    label's box overlaps nothing kept (names, nodes, other labels); an edge with no free spot goes unlabelled."""
    kept = []
    for item, text, (ax_, ay), (bx, by) in candidates:
        half_w, half_h = 0.3 * font_px * len(text) + 3, 0.75 * font_px
        for t in _LABEL_SPOTS:
            x, y = ax_ + t * (bx - ax_), ay + t * (by - ay)
            box = (x - half_w, y - half_h, x + half_w, y + half_h)
            if not any(_boxes_overlap(box, other) for other in taken):
                taken.append(box)
                kept.append((item, text, t))
                break
    return kept


def draw_png(sub: Subgraph, path: str | os.PathLike[str], *, subtitle: str = "") -> dict[str, Any]:
    # matplotlib loads when a picture is drawn, and pyplot only after the Agg backend is chosen (no display)
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.lines import Line2D  # noqa: PLC0415

    graph = to_networkx(sub)
    pos = layout(graph)
    colours = type_colours(sub)
    n = graph.number_of_nodes()
    side = 9 + min(9, n / 8)
    fig, ax = plt.subplots(figsize=(side * 1.25, side), dpi=130)
    ax.set_axis_off()
    degrees = {k: max(1, graph.nodes[k]["degree"]) for k in graph.nodes}
    top_degree = max(degrees.values(), default=1)
    # Smaller discs when there are many, so a hub's ring of neighbours does not pile up.
    scale = 1.0 if n <= 20 else max(0.45, 20 / n)
    sizes = [scale * (320 + 1700 * math.log1p(degrees[k]) / math.log1p(top_degree)) for k in graph.nodes]
    widths = [0.8 + 2.2 * min(1.0, graph.edges[e]["weight"] / 10.0) for e in graph.edges]
    nx.draw_networkx_edges(graph, pos, ax=ax, width=widths, edge_color="#8a8a8a", alpha=0.7)
    nx.draw_networkx_nodes(
        graph,
        pos,
        ax=ax,
        node_size=sizes,
        node_color=[colours[graph.nodes[k]["type"]] for k in graph.nodes],
        edgecolors=["#c0392b" if k in sub.center else "white" for k in graph.nodes],
        linewidths=[3.5 if k in sub.center else 1.2 for k in graph.nodes],
    )
    if pos:
        xs, ys = zip(*pos.values())
        pad_x, pad_y = 0.12 * (max(xs) - min(xs) or 1), 0.12 * (max(ys) - min(ys) or 1)
        ax.set_xlim(min(xs) - pad_x, max(xs) + pad_x)
        ax.set_ylim(min(ys) - pad_y, max(ys) + pad_y * 1.6)
    shown = [(t, c) for t, c in colours.items() if c != OTHER_COLOUR]
    others = len(colours) - len(shown)
    handles = [Line2D([0], [0], marker="o", color="w", markerfacecolor=c, markersize=10, label=t) for t, c in shown]
    if others:
        handles.append(
            Line2D(
                [0],
                [0],
                marker="o",
                color="w",
                markerfacecolor=OTHER_COLOUR,
                markersize=10,
                label=f"other ({others} types)",
            )
        )
    if handles:
        ax.legend(
            handles=handles,
            title="entity type",
            loc="upper left",
            bbox_to_anchor=(1.0, 1.0),
            frameon=False,
            fontsize=9,
            title_fontsize=10,
        )
    ax.set_title(sub.title + (f"\n{subtitle}" if subtitle else ""), fontsize=12, loc="left")
    fig.text(
        0.01,
        0.01,
        "node size: degree in the whole graph · edge width: relation weight · "
        "edge label: the relation's first keyword (where it fits)",
        fontsize=8,
        color="#666666",
    )
    fig.tight_layout()
    # Labels last, in display coordinates of the final layout: names first, then edge keywords where they fit.
    to_px = ax.transData.transform
    points_px = fig.dpi / 72.0
    # Discs first (nothing may cover them), then names: the centre's, then by degree; a name goes above its
    # disc, else below, else (it would cover another name) is left to the HTML view, which shows every name.
    taken: list[tuple[float, float, float, float]] = []
    discs = {}
    for k, node_size in zip(graph.nodes, sizes, strict=True):
        cx, cy = to_px(pos[k])
        radius = 0.5 * math.sqrt(node_size) * points_px  # node_size is an area in points squared
        discs[k] = (cx, cy, radius)
        taken.append((cx - radius, cy - radius, cx + radius, cy + radius))
    names = []
    order = sorted(graph.nodes, key=lambda k: (k not in sub.center, -degrees[k], k))
    for k in order:
        text = short(graph.nodes[k]["name"], 28)
        cx, cy, radius = discs[k]
        size = 10 if k in sub.center else 8.5
        half_w, height = 0.3 * size * points_px * len(text) + 4, 1.6 * size * points_px
        gap = radius + 3 * points_px
        for side in (1, -1):  # above, below
            y0 = cy + gap if side == 1 else cy - gap - height
            box = (cx - half_w, y0, cx + half_w, y0 + height)
            own = (cx - radius, cy - radius, cx + radius, cy + radius)
            if k in sub.center or not any(_boxes_overlap(box, t) for t in taken if t != own):
                taken.append(box)
                names.append((k, text, pos[k], side * (gap / points_px), size))
                break
    hidden_names = n - len(names)
    ranked = sorted(
        (e for e in graph.edges if graph.edges[e]["keywords"]), key=lambda e: (-graph.edges[e]["weight"], e)
    )[:MAX_EDGE_LABELS]
    candidates = [
        (e, short(graph.edges[e]["keywords"][0], 22), tuple(to_px(pos[e[0]])), tuple(to_px(pos[e[1]]))) for e in ranked
    ]
    placed = _free_labels(candidates, taken, 7.5 * points_px)
    for (a, b), text, t in placed:
        (xa, ya), (xb, yb) = pos[a], pos[b]
        ax.text(
            xa + t * (xb - xa),
            ya + t * (yb - ya),
            text,
            fontsize=7.5,
            color="#5d4037",
            ha="center",
            va="center",
            bbox={"boxstyle": "round,pad=0.15", "fc": "#fff8e1", "ec": "none", "alpha": 0.9},
        )
    for k, text, (x, y), offset, size in names:
        ax.annotate(
            text,
            (x, y),
            xytext=(0, offset),
            textcoords="offset points",
            ha="center",
            va="bottom" if offset > 0 else "top",
            fontsize=size,
            fontweight="bold" if k in sub.center else "normal",
            zorder=5,
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "#dddddd", "alpha": 0.9},
        )
    if hidden_names:
        fig.text(
            0.99,
            0.01,
            f"{hidden_names} names left out where they would overlap (the .html view shows all)",
            fontsize=8,
            color="#666666",
            ha="right",
        )
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return {"nodes": n, "edges": graph.number_of_edges(), "edge_labels": len(placed), "names_hidden": hidden_names}
