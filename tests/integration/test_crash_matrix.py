"""The crash matrix: real process death at every stage of an index build, then a rerun; the result must equal a
clean build BY CONTENT (every graph table's rows, every vector family's key -> vector).

* the driver dies in ingest, extract, merge, embed and write (``HXD2_CRASH_AT=driver:<stage>``: ``os._exit`` in
  the driver, or SIGKILL of the driver from the actor that just persisted a batch, so it dies mid-stage): one
  output, each run killed one stage further, then a run that finishes;
* an extraction and an embedding actor die mid-batch (``worker:extract`` / ``worker:embed``, once each) inside
  runs of that chain: Ray restarts them and retries the batch; the run with the embedding death finishes by
  itself, equals the clean build, and its ``--json`` stdout is still JSON (issue 17, item 11);
* the clean build races a second build into the same output: exactly one runs, the other refuses naming it
  (item 9); the write-stage kill leaves a ``.building-*`` folder that the finishing run removes (item 10).

Every run is a separate driver process (``python -m jobs.cli index``) joined to the session's local Ray, with
the scripted LLM and the hashing embedder, so builds are deterministic and a run takes seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hxd2_ray.stages.faults import CRASH_AT_ENV, CRASH_EXIT_CODE, CRASH_ONCE_DIR_ENV
from tests.integration.index_content import GRAPH_ROWS, graph_rows, vector_contents
from tests.stand_ins import STAND_IN_OVERRIDES

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "hxd2_ray" / "sample_data" / "corpus"
DOCS = ("brian_kobilka.txt", "thomas_sudhof.md", "TAC4.md")
# Small chunks and batches: 10 chunks in 5 extraction batches, ~200 texts in 7 embedding batches, so a kill
# after the first batch leaves a stage half done.
SETTINGS = [
    *STAND_IN_OVERRIDES,
    "chunking.chunk_size_chars=300",
    "ray.ner_batch_size=2",
    "ray.embed_batch_size=32",
    "ray.extraction_shards=4",
    "embedding.dim=32",
]

# Each graph table as rows (module constants: the test reads fixed tables, nothing is pasted in).


@pytest.fixture(scope="module")
def cluster(request) -> str:
    """The address the driver processes join: the cluster ``RAY_ADDRESS`` names, else the session's local Ray."""
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    request.getfixturevalue("ray_local")
    import ray

    return ray.get_runtime_context().gcs_address


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("crash-corpus")
    for name in DOCS:
        shutil.copy(SAMPLE / name, folder / name)
    return folder


def _start(
    cluster: str, corpus: Path, out: Path, crash: str = "", once_dir: Path | None = None, extra: tuple[str, ...] = ()
) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in (CRASH_AT_ENV, CRASH_ONCE_DIR_ENV)}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_DEDUP_LOGS": "1"})
    if crash:
        env[CRASH_AT_ENV] = crash
        env[CRASH_ONCE_DIR_ENV] = str(once_dir or out.parent / f".once-{out.name}")
    sets = [arg for s in [*SETTINGS, f"ray.address={cluster}"] for arg in ("--set", s)]
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobs.cli",
            "index",
            "--input",
            str(corpus),
            "--output",
            str(out),
            "--json",
            *extra,
            *sets,
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=600)
    return proc.returncode, out, err


def _build(cluster, corpus, out, crash="", once_dir=None, extra=()) -> tuple[int, str, str]:
    return _finish(_start(cluster, corpus, out, crash, once_dir, extra))


def _same_content(index: Path, clean: Path) -> None:
    assert (index / "manifest.json").exists()
    got, want = graph_rows(index), graph_rows(clean)
    for table in GRAPH_ROWS:
        assert got[table] == want[table], f"graph table {table} differs from the clean build"
    got_v, want_v = vector_contents(index), vector_contents(clean)
    for family in want_v:
        assert got_v[family].keys() == want_v[family].keys(), f"vector family {family}: other keys"
        assert got_v[family] == want_v[family], f"vector family {family}: other vectors"
    assert (
        json.loads((index / "manifest.json").read_text())["counts"]
        == json.loads((clean / "manifest.json").read_text())["counts"]
    )


@pytest.fixture(scope="module")
def clean(cluster, corpus, tmp_path_factory) -> Path:
    """The reference build, raced by a second build into the same output: exactly one of them may run."""
    out = tmp_path_factory.mktemp("clean") / "index"
    first = _start(cluster, corpus, out)
    time.sleep(0.5)
    second = _start(cluster, corpus, out)
    results = {p.pid: _finish(p) for p in (first, second)}
    codes = sorted(code for code, _, _ in results.values())
    assert codes == [0, 2], {pid: (c, e[-2000:]) for pid, (c, _, e) in results.items()}
    winner = next(pid for pid, (c, _, _) in results.items() if c == 0)
    refused = next(err for c, _, err in results.values() if c == 2)
    assert f"another build is writing to {out}" in refused and f"pid {winner}" in refused and "started 20" in refused
    assert not (out / ".hxd2-build.lock").exists()
    return out


# One output, each run killed one point further; workers die inside runs that go on. (point(s), the run survives?)
# A run over a finished index of the same input changes nothing (an incremental update finds no change), so the
# write-stage kill is armed on an --overwrite rebuild (which keeps the LLM cache).
CHAIN = (
    ("driver:ingest", False),
    ("driver:extract", False),  # an actor kills the driver after persisting its first batch: extraction half done
    ("worker:extract,driver:merge", False),  # the rest of the extraction loses an actor mid-batch; merge dies
    ("driver:embed", False),
    ("worker:embed", True),  # an embedding actor dies mid-batch; the run finishes and prints its JSON summary
    ("driver:write", False),  # rebuilt with --overwrite: killed in write, leaving .building-* and no manifest
)
OVERWRITE_AT = "driver:write"


def test_killed_everywhere_then_resumed_equals_a_clean_build(cluster, corpus, clean, tmp_path):
    out = tmp_path / "index"
    for step, (points, survives) in enumerate(CHAIN):
        once = tmp_path / f"once-{step}"
        code, stdout, err = _build(
            cluster, corpus, out, crash=points, once_dir=once, extra=("--overwrite",) if points == OVERWRITE_AT else ()
        )
        for point in points.split(","):  # each point fired (its marker), whoever it killed
            assert (once / f"{point.replace(':', '-')}.fired").exists(), f"{point} never fired:\n{err[-3000:]}"
        if survives:
            assert code == 0, f"{points}: the run should survive its dead worker:\n{err[-3000:]}"
            summary = json.loads(stdout)  # nothing Ray printed about the dead worker reached stdout
            # The worker's last line reaches the run's log file (the quiet console's), or stderr when it arrives late.
            logs = "".join(p.read_text(errors="replace") for p in (out / "_logs").glob("*.log"))
            assert summary["failed_chunks"] == 0 and "dies at worker:" in err + logs
            _same_content(out, clean)
        else:
            assert code in (CRASH_EXIT_CODE, -9), f"{points}: the driver did not die (exit {code}):\n{err[-3000:]}"
            assert stdout == "" and not (out / "manifest.json").exists(), f"{points}: output after a crash"
    assert list(out.glob(".building-*")), "the write-stage kill should leave its build folder behind"
    code, stdout, err = _build(cluster, corpus, out)
    assert code == 0, err[-3000:]
    assert json.loads(stdout)["stage_status"]["extract"].startswith("skipped")
    logs = "".join(p.read_text(errors="replace") for p in (out / "_logs").glob("*.log"))
    assert not list(out.glob(".building-*")) and "left by a build that was killed" in err + logs
    _same_content(out, clean)


def _change(cluster: str, args: list[str], crash: str = "", once_dir: Path | None = None) -> tuple[int, str, str]:
    """``hxd2 index ARGS`` (an update, or ``delete ...``) as its own driver process joined to the session's Ray."""
    env = {k: v for k, v in os.environ.items() if k not in (CRASH_AT_ENV, CRASH_ONCE_DIR_ENV)}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_DEDUP_LOGS": "1"})
    if crash:
        env[CRASH_AT_ENV] = crash
        env[CRASH_ONCE_DIR_ENV] = str(once_dir)
    sets = [arg for s in [*SETTINGS, f"ray.address={cluster}"] for arg in ("--set", s)]
    delete = args[0] == "delete"
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "index", *args, "--json", *(sets if not delete else sets[-2:])],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


# A delete extracts nothing and here embeds nothing either (what survives was embedded before): its extraction
# and embedding points never fire. An update extracts and embeds the new document's chunks.
UPDATE_POINTS = ("driver:ingest", "driver:extract", "driver:merge", "driver:embed", "driver:write")
DELETE_POINTS = ("driver:ingest", "driver:merge", "driver:write")
# A sync (issue 45) adds, changes and deletes in one change: killed as it starts and as it publishes.
SYNC_POINTS = ("driver:ingest", "driver:write")


def test_an_update_and_a_delete_killed_at_every_stage_equal_clean_builds(cluster, tmp_path):
    """Issue 33, item 3: each change killed at each stage leaves the published generation as it was; the rerun
    publishes what a clean build of the final corpus holds, by content. Issue 45: a sync too."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name in DOCS[:2]:
        shutil.copy(SAMPLE / name, folder / name)
    out = tmp_path / "index"
    code, _, err = _build(cluster, folder, out)
    assert code == 0, err[-3000:]
    before_change = tmp_path / "two-documents"
    shutil.copytree(out, before_change, ignore=shutil.ignore_patterns("_logs", "_leases"))
    shutil.copy(SAMPLE / DOCS[2], folder / DOCS[2])
    clean_three = tmp_path / "clean-three"
    code, _, err = _build(cluster, folder, clean_three)
    assert code == 0, err[-3000:]

    def killed_then_finished(args: list[str], points: tuple[str, ...], want: Path) -> None:
        published = json.loads((out / "manifest.json").read_text())["generation"]
        for point in points:
            kind = "sync" if "--sync" in args else args[0]  # each change fires each point once
            once = tmp_path / f"once-{kind}-{point.replace(':', '-')}"
            code, stdout, err = _change(cluster, args, crash=point, once_dir=once)
            assert (once / f"{point.replace(':', '-')}.fired").exists(), f"{point} never fired:\n{err[-3000:]}"
            assert code in (CRASH_EXIT_CODE, -9), f"{point}: the driver did not die (exit {code}):\n{err[-3000:]}"
            # the index readers see is the one before the change, whole
            assert json.loads((out / "manifest.json").read_text())["generation"] == published, point
        code, stdout, err = _change(cluster, args)
        assert code == 0, err[-3000:]
        assert json.loads((out / "manifest.json").read_text())["generation"] != published
        _same_content(out, want)

    killed_then_finished(["--input", str(folder), "--output", str(out)], UPDATE_POINTS, clean_three)
    killed_then_finished(
        ["delete", "--output", str(out), "--source", str(folder / DOCS[2])], DELETE_POINTS, before_change
    )
    # --sync: the folder lost its first document and keeps the third the index no longer holds; one generation
    # later the index is exactly the folder, as a clean build of it is.
    (folder / DOCS[0]).unlink()
    clean_synced = tmp_path / "clean-synced"
    code, _, err = _build(cluster, folder, clean_synced)
    assert code == 0, err[-3000:]
    killed_then_finished(["--input", str(folder), "--output", str(out), "--sync"], SYNC_POINTS, clean_synced)
