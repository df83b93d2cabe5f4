"""Before a job's first stage: does every node of the Ray cluster see the output and the inputs the driver sees?

One task per alive node (pinned with a hard node-affinity strategy, ``num_cpus=0`` so a busy node still runs it)
runs :func:`hxd2_ray.index_store.cluster_storage.node_probe`; the driver judges the probes and refuses the job with
the fix named (an ``s3://`` location or a filesystem mounted on every node). On a one-node cluster there is
nothing to compare and nothing runs.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any, Sequence

import pyarrow.fs as pafs

from hxd2_ray.errors import ClusterStorageError
from hxd2_ray.index_store.cluster_storage import (
    ReadCheck,
    driver_probe_path,
    judge_probes,
    node_probe,
    remove_probes,
    write_json,
)

# A node that has not answered by then is reported, not waited for forever (a probe touches a few files).
PROBE_TIMEOUT_S = 300


def alive_nodes() -> list[dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


def check_every_node(
    fs: pafs.FileSystem | None,
    folder: str,
    location: str,
    *,
    reads: Sequence[ReadCheck] = (),
    what: str = "output",
    log: Any = None,
) -> int:
    """Probe ``folder`` (written by every node; ``fs`` None: only reads) and ``reads`` from each alive node; raise
    :class:`ClusterStorageError` when one differs from the driver. Returns how many nodes were probed (0 on a
    one-node cluster, where nothing is probed)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = alive_nodes()
    if len(nodes) < 2:
        return 0
    token = uuid.uuid4().hex[:12]
    if fs is not None:
        write_json(fs, driver_probe_path(folder, token), {"token": token})
    probe = ray.remote(num_cpus=0, max_retries=0)(node_probe)
    refs = [
        probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False)).remote(
            fs, folder, token, n["NodeID"], list(reads), n.get("NodeManagerAddress")
        )
        for n in nodes
    ]
    try:
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=PROBE_TIMEOUT_S)
        results = ray.get(ready)
        if pending:
            late = [n["NodeID"][:12] for n, ref in zip(nodes, refs, strict=True) if ref in pending]
            raise ClusterStorageError(
                f"nodes {', '.join(late)} did not answer the storage probe within "
                f"{PROBE_TIMEOUT_S}s; the {what} {location} could not be checked"
            )
        judge_probes(fs, folder, token, results, location, what)
    finally:
        if fs is not None:
            remove_probes(fs, folder, token)
    if log is not None:
        log(f"{len(nodes)} nodes see the same {what} {location}")
    else:
        print(f"[cluster] {len(nodes)} nodes see the same {what} {location}", file=sys.stderr)
    return len(nodes)
