"""Is the job's storage the same on every node of the cluster? Probes before the first stage, and a check of what
the actors report they wrote.

On a multi-node Ray cluster a local path (``/data/index``) names a different folder on every node unless a shared
filesystem is mounted there: an actor on another node writes its results where the driver never looks. Two checks
turn that silent loss into an early, clear error:

* **before the first stage**, one task per node (:func:`node_probe`) reads a probe file the driver wrote, writes
  one of its own, and looks for the input files; the driver (:func:`judge_probes`) then reads every node's probe.
  A node that cannot see the driver's file, or whose file the driver cannot see, refuses the job before any work;
* **after a stage**, every file an actor reported writing must be readable by the driver with the row count the
  actor reported (:func:`check_reported_files`); otherwise the job stops before anything is merged or published.

Both errors name the fix: an ``s3://`` location, or a filesystem mounted at the same path on every node.
"""

from __future__ import annotations

import json
import posixpath
import socket
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from hxd2_ray.errors import ClusterStorageError

PROBE_FOLDER = "_probes"


def advice(what: str) -> str:
    return (
        f"use an s3:// {what}, or a filesystem mounted at the same path on every node (NFS, a shared volume); "
        "a local path is only shared by the processes of one machine"
    )


def driver_probe_path(folder: str, token: str) -> str:
    return posixpath.join(folder, PROBE_FOLDER, f"driver-{token}.json")


def node_probe_path(folder: str, token: str, node: str) -> str:
    return posixpath.join(folder, PROBE_FOLDER, f"node-{node}-{token}.json")


def write_json(fs: pafs.FileSystem, path: str, payload: dict[str, Any]) -> None:
    fs.create_dir(posixpath.dirname(path), recursive=True)
    with fs.open_output_stream(path) as out:
        out.write(json.dumps(payload).encode())


@dataclass(frozen=True)
class ReadCheck:
    """Files a node must be able to read (the input files, an index's manifest), on one filesystem."""

    fs: pafs.FileSystem
    paths: tuple[str, ...]
    what: str  # "input", "index"


def node_probe(
    fs: pafs.FileSystem | None,
    folder: str,
    token: str,
    node: str,
    reads: Sequence[ReadCheck] = (),
    host: str | None = None,
) -> dict[str, Any]:
    """What one node sees (run by a task pinned to that node): the driver's probe, its own probe written, and
    which of the files it must read are missing. ``fs`` None: no output to check (only reads)."""
    result: dict[str, Any] = {
        "node": node,
        "host": host or socket.gethostname(),
        "sees_driver": True,
        "write_error": "",
        "missing": {},
    }
    if fs is not None:
        result["sees_driver"] = fs.get_file_info(driver_probe_path(folder, token)).type == pafs.FileType.File
        try:
            write_json(fs, node_probe_path(folder, token, node), {"node": node, "token": token})
        except OSError as exc:
            result["write_error"] = f"{type(exc).__name__}: {exc}"[:300]
    for check in reads:
        infos = check.fs.get_file_info(list(check.paths)) if check.paths else []
        missing = [i.path for i in infos if i.type == pafs.FileType.NotFound]
        if missing:
            result["missing"][check.what] = missing
    return result


def judge_probes(
    fs: pafs.FileSystem | None,
    folder: str,
    token: str,
    results: Iterable[dict[str, Any]],
    location: str,
    what: str = "output",
) -> None:
    """Raise :class:`ClusterStorageError` naming every node that does not share ``location`` with the driver."""
    problems = []
    for r in results:
        where = f"node {r['node'][:12]} ({r['host']})"
        if fs is not None:
            if not r["sees_driver"]:
                problems.append(f"{where} does not see the file the driver wrote under {location}")
            if r["write_error"]:
                problems.append(f"{where} cannot write under {location}: {r['write_error']}")
            elif fs.get_file_info(node_probe_path(folder, token, r["node"])).type != pafs.FileType.File:
                problems.append(f"{where} wrote a file under {location} that the driver cannot see")
        for kind, missing in sorted(r["missing"].items()):
            problems.append(f"{where} cannot read {len(missing)} {kind} file(s), e.g. {missing[0]}")
    if problems:
        raise ClusterStorageError(
            f"the {what} {location} is not the same on every node of the Ray cluster: "
            + "; ".join(problems[:6])
            + (f" (and {len(problems) - 6} more)" if len(problems) > 6 else "")
            + f". Nothing was started. Fix: {advice(what)}"
        )


def remove_probes(fs: pafs.FileSystem, folder: str, token: str) -> None:
    base = posixpath.join(folder, PROBE_FOLDER)
    for info in fs.get_file_info(pafs.FileSelector(base, allow_not_found=True)):
        if info.type == pafs.FileType.File and token in posixpath.basename(info.path):
            try:
                fs.delete_file(info.path)
            except FileNotFoundError:
                pass


# --------------------------------------------------------------------------------------------- after a stage


@dataclass(frozen=True)
class ReportedFile:
    """A file an actor wrote, as the actor reported it."""

    path: str
    rows: int
    node: str = ""


@dataclass
class FileAudit:
    checked: int = 0
    missing: list[ReportedFile] = field(default_factory=list)
    short: list[tuple[ReportedFile, int]] = field(default_factory=list)  # (reported, rows found)


def audit_reported_files(fs: pafs.FileSystem, reported: Iterable[ReportedFile]) -> FileAudit:
    """Look for every reported file where the driver reads, with the reported row count."""
    audit = FileAudit()
    for rep in reported:
        if not rep.path:
            continue
        audit.checked += 1
        try:
            rows = pq.read_metadata(rep.path, filesystem=fs).num_rows
        except (OSError, pa.ArrowInvalid):
            audit.missing.append(rep)
            continue
        if rows != rep.rows:
            audit.short.append((rep, rows))
    return audit


def check_reported_files(
    fs: pafs.FileSystem, reported: Iterable[ReportedFile], stage: str, location: str, what: str = "output"
) -> int:
    """Raise :class:`ClusterStorageError` if a file an actor reported is not readable here with its rows; returns
    how many files were checked."""
    audit = audit_reported_files(fs, reported)
    if audit.missing or audit.short:
        nodes = sorted({r.node[:12] for r in audit.missing if r.node} | {r.node[:12] for r, _ in audit.short if r.node})
        examples = [f"{r.path} ({r.rows} rows) is missing" for r in audit.missing[:2]]
        examples += [f"{r.path} has {n} rows, {r.rows} reported" for r, n in audit.short[:2]]
        raise ClusterStorageError(
            f"{len(audit.missing) + len(audit.short)} of {audit.checked} files the {stage} actors reported writing "
            f"are not readable where the driver reads {location}: {'; '.join(examples)}"
            + (f"; written on node(s) {', '.join(nodes)}" if nodes else "")
            + ". The job stopped before merging or publishing anything (the current index, if any, is unchanged). "
            f"Fix: {advice(what)}"
        )
    return audit.checked
