"""What a user checks before trusting an index: counts, degrees, entity types, components, and what was lost.

Read in pages through the graph store (``iter_pages``), so a 1M-entity graph costs its degree array (8 bytes
per entity) and the edge endpoint arrays (16 bytes per relation) for the components, which scipy's
``connected_components`` labels. Quarantine reasons and extraction failures come from the index's
``index_summary.json`` (and the per-file rows under ``_staging/quarantine/`` when the build left them).
"""

from __future__ import annotations

import heapq
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

_SUMMARY_KEYS = (
    "documents",
    "chunks",
    "quarantined_files",
    "quarantine_reasons",
    "duplicate_documents",
    "llm_calls",
    "malformed_records",
    "failed_chunks",
    "failed_chunk_errors",
    "endpoint_only_entities",
    "malformed_lines",
    "malformed_examples",
    "dropped_triples",
    "llm_model",
    "embedding_model",
)


def _degree_histogram(degrees: np.ndarray) -> list[dict[str, int]]:
    """Counts of entities per degree bin: 0, 1, 2, 3-4, 5-8, 9-16, ... (doubling)."""
    if degrees.size == 0:
        return []
    bins = [(0, 0), (1, 1), (2, 2)]
    lo = 3
    top = int(degrees.max())
    while lo <= top:
        hi = 2 * (lo - 1)
        bins.append((lo, hi))
        lo = hi + 1
    return [{"min": a, "max": b, "entities": int(((degrees >= a) & (degrees <= b)).sum())} for a, b in bins]


def _components(store: Any, n_nodes: int) -> dict[str, Any]:
    ends_a: list[np.ndarray] = []
    ends_b: list[np.ndarray] = []
    for page in store.iter_pages("RELATED_ENDS"):
        ends_a.append(page["a"].to_numpy())
        ends_b.append(page["b"].to_numpy())
    a = np.concatenate(ends_a) if ends_a else np.zeros(0, np.int64)
    b = np.concatenate(ends_b) if ends_b else np.zeros(0, np.int64)
    n = max(n_nodes, int(max(a.max(initial=-1), b.max(initial=-1))) + 1)
    if n == 0:
        return {"count": 0, "largest": [], "singletons": 0, "largest_share": 0.0}
    matrix = coo_matrix((np.ones(a.size, np.int8), (a, b)), shape=(n, n))
    count, labels = connected_components(matrix, directed=False)
    sizes = np.bincount(labels)
    order = np.sort(sizes)[::-1]
    return {
        "count": int(count),
        "largest": [int(x) for x in order[:10]],
        "singletons": int((sizes == 1).sum()),
        "largest_share": round(float(order[0]) / n, 4),
    }


def _quarantine_files(root: Path, limit: int) -> list[dict[str, str]]:
    folder = root / "_staging" / "quarantine"
    if not folder.is_dir():
        return []
    rows: list[dict[str, str]] = []
    for f in sorted(folder.glob("*.parquet")):
        rows.extend(pq.read_table(f, columns=["source_path", "reason", "detail"]).to_pylist())
        if len(rows) >= limit:
            break
    return rows[:limit]


def graph_stats(store: Any, index_root: str | os.PathLike[str] | None = None, top: int = 10) -> dict[str, Any]:
    counts = store.counts()
    degree_parts: list[np.ndarray] = []
    types: Counter[str] = Counter()
    best: list[tuple[int, str, str]] = []
    for page in store.iter_pages("Entity"):
        deg = page["degree"].to_numpy(zero_copy_only=False).astype(np.int64)
        degree_parts.append(deg)
        types.update(page["type"].to_pylist())
        # Only this page's top candidates become Python rows.
        for i in np.argsort(-deg, kind="stable")[:top]:
            item = (int(deg[i]), page["key"][int(i)].as_py(), page["name"][int(i)].as_py())
            if len(best) < top:
                heapq.heappush(best, item)
            else:
                heapq.heappushpop(best, item)
    degrees = np.concatenate(degree_parts) if degree_parts else np.zeros(0, np.int64)
    stats: dict[str, Any] = {
        "counts": counts,
        "degree": {
            "mean": round(float(degrees.mean()), 3) if degrees.size else 0.0,
            "median": float(np.median(degrees)) if degrees.size else 0.0,
            "max": int(degrees.max()) if degrees.size else 0,
            "isolated": int((degrees == 0).sum()),
            "histogram": _degree_histogram(degrees),
        },
        "top_entities": [{"name": n, "key": k, "degree": d} for d, k, n in sorted(best, reverse=True)],
        "entity_types": [{"type": t or "(none)", "entities": c} for t, c in types.most_common()],
        "components": _components(store, int(degrees.size)),
    }
    if index_root is not None:
        root = Path(index_root)
        summary_path = root / "index_summary.json"
        summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else {}
        stats["build"] = {k: summary[k] for k in _SUMMARY_KEYS if k in summary}
        stats["build"]["summary_found"] = summary_path.is_file()
        stats["quarantined_examples"] = _quarantine_files(root, top)
    return stats


def format_stats(stats: dict[str, Any]) -> str:
    c = stats["counts"]
    d = stats["degree"]
    comp = stats["components"]
    lines = [
        (
            f"graph: {c['entities']:,} entities, {c['relations']:,} relations, {c['chunks']:,} chunks, "
            f"{c['documents']:,} documents, {c['mentions']:,} mentions"
        ),
        (
            f"degree: mean {d['mean']:.2f}, median {d['median']:.0f}, max {d['max']:,}; "
            f"{d['isolated']:,} entities without a relation"
        ),
        "  "
        + "  ".join(
            f"{b['min']}{'' if b['min'] == b['max'] else '-' + str(b['max'])}: {b['entities']:,}"
            for b in d["histogram"]
        ),
        (
            f"components: {comp['count']:,} (largest {', '.join(f'{x:,}' for x in comp['largest'][:5]) or '-'}; "
            f"{comp['singletons']:,} single entities; the largest holds {100 * comp['largest_share']:.1f}%)"
        ),
        "most connected: " + ", ".join(f"{e['name']} ({e['degree']})" for e in stats["top_entities"][:8]),
        "entity types: " + ", ".join(f"{t['type']} {t['entities']:,}" for t in stats["entity_types"][:10]),
    ]
    build = stats.get("build")
    if build is not None:
        if not build.get("summary_found"):
            lines.append("build: no index_summary.json (quarantine and extraction failures unknown)")
        else:
            reasons = build.get("quarantine_reasons") or {}
            lines.append(
                f"quarantined files: {build.get('quarantined_files', 0):,}"
                + (" (" + ", ".join(f"{k}: {v}" for k, v in reasons.items()) + ")" if reasons else "")
            )
            if "failed_chunks" in build:
                lines.append(
                    f"extraction: {build.get('failed_chunks', 0):,} failed chunks, "
                    f"{build.get('malformed_records', 0):,} malformed LLM records skipped, "
                    f"{build.get('llm_calls', 0):,} LLM calls"
                )
                for err in build.get("failed_chunk_errors") or []:
                    lines.append(f"  failure: {err}")
            if "malformed_lines" in build:
                lines.append(
                    f"triples: {build['malformed_lines']:,} malformed lines skipped, "
                    f"{build.get('dropped_triples', 0):,} dropped (self-loops)"
                )
        for q in stats.get("quarantined_examples") or []:
            lines.append(f"  quarantined: {q['source_path']} ({q['reason']}: {q['detail'][:80]})")
    return "\n".join(lines)


def plot_stats(stats: dict[str, Any], path: str | os.PathLike[str]) -> None:
    # matplotlib loads when a plot is drawn, and pyplot only after the Agg backend is chosen (no display)
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(2, 2, figsize=(13, 9), dpi=110)
    hist = stats["degree"]["histogram"]
    ax = axes[0][0]
    labels = [str(b["min"]) if b["min"] == b["max"] else f"{b['min']}-{b['max']}" for b in hist]
    ax.bar(range(len(hist)), [max(b["entities"], 0) for b in hist], color="#4e79a7")
    ax.set_xticks(range(len(hist)), labels, rotation=45, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_title("Degree distribution")
    ax.set_xlabel("degree (relations per entity)")
    ax.set_ylabel("entities (log scale)")

    ax = axes[0][1]
    types = stats["entity_types"][:15][::-1]
    ax.barh([t["type"][:30] for t in types], [t["entities"] for t in types], color="#59a14f")
    ax.set_title("Entity types (top 15)")
    ax.set_xlabel("entities")
    ax.set_ylabel("entity type")

    ax = axes[1][0]
    largest = stats["components"]["largest"]
    ax.bar(range(1, len(largest) + 1), largest, color="#f28e2b")
    ax.set_yscale("log")
    ax.set_title(f"Largest connected components ({stats['components']['count']:,} in all)")
    ax.set_xlabel("component rank (largest first)")
    ax.set_ylabel("entities (log scale)")

    ax = axes[1][1]
    build = stats.get("build") or {}
    bars = {f"quarantined: {k}": v for k, v in (build.get("quarantine_reasons") or {}).items()}
    for key, label in (
        ("failed_chunks", "failed chunks"),
        ("malformed_records", "malformed LLM records"),
        ("malformed_lines", "malformed triple lines"),
        ("duplicate_documents", "duplicate documents"),
    ):
        if key in build:
            bars[label] = build[key]
    if bars:
        ax.barh(list(bars)[::-1], list(bars.values())[::-1], color="#e15759")
        ax.set_title("What the build lost or skipped")
        ax.set_xlabel("count")
    else:
        ax.text(0.5, 0.5, "no build summary (index_summary.json) found", ha="center", va="center")
        ax.set_axis_off()
    c = stats["counts"]
    fig.suptitle(
        f"{c['entities']:,} entities, {c['relations']:,} relations, {c['chunks']:,} chunks, "
        f"{c['documents']:,} documents",
        fontsize=13,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
