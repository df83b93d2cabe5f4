"""The evaluation job's records on disk: one Parquet file of trace rows per shard and mode, and reading them back.

``<run>/shards/<mode>/shard-<NNNN>.parquet``: a shard's file is written whole by one answering call (atomic: temp +
rename locally, one PUT on S3), so a rerun skips exactly the shards whose file exists.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from hxd2_ray.stages import staging as st

TRACES = pa.schema(
    [
        ("id", pa.string()),
        ("position", pa.int64()),
        ("shard", pa.int64()),
        ("mode", pa.string()),
        ("path", pa.string()),
        ("answer", pa.string()),
        ("scores", pa.string()),  # JSON {metric: float}
        ("correct", pa.bool_()),
        ("latency_s", pa.float64()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("verifier", pa.string()),  # "yes" / "no" / "" (did not run)
        ("evidence_ids", pa.list_(pa.string())),  # source ids of the referenced documents, in order
        ("llm_errors", pa.int64()),
        ("error", pa.string()),
        # Why the answer took its path (e.g. "fallback: invalid plan: ..."); null in shards written before it existed.
        ("path_reason", pa.string()),
        # Ranked candidate answers where the path ranks them (the graph walk); null in older shards.
        ("candidates", pa.list_(pa.string())),
    ]
)

SHARD_STATS = pa.schema(
    [
        ("mode", pa.string()),
        ("shard", pa.int64()),
        ("questions", pa.int64()),
        ("errors", pa.int64()),
        ("seconds", pa.float64()),
    ]
)


def shard_path(out_root: str, mode: str, shard: int) -> str:
    return posixpath.join(out_root, "shards", mode, f"shard-{shard:04d}.parquet")


def load_traces(fs: Any, root: str, modes: list[str] | None = None) -> list[dict[str, Any]]:
    """All trace rows under ``<root>/shards``, modes in the given order (else by name), rows by position."""
    folder = posixpath.join(root, "shards")
    if modes is None:
        infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        modes = sorted(posixpath.basename(i.path) for i in infos if i.type == pafs.FileType.Directory)
    out: list[dict[str, Any]] = []
    for mode in modes:
        read = st.read_staged(fs, posixpath.join(folder, mode), TRACES)
        rows = sorted(read.table.to_pylist(), key=lambda r: r["position"])
        for r in rows:
            r["scores"] = json.loads(r["scores"] or "{}")
        out.extend(rows)
    return out
