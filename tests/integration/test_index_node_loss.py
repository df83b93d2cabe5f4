"""The index job loses a worker node mid-stage (issue 33, item 2): a real two-node Ray cluster on this machine, the
LLM and embedding stages pinned to the second node (``ray.stage_resources``), and that node's processes — its
raylet, agents and the extraction actor — frozen then SIGKILLed while the extract stage is half done, as a machine
that drops off the network and dies.

Ray restarts the lost actor, but only a node offering the pinned resource may host it and none is left: without a
bound the job waited for one for ever (its progress line frozen). It now fails within ``ray.resource_wait_s`` of
Ray declaring the node dead, with one error line naming the missing resource and the fix, and leaves a resumable
state (the batches persisted before the loss, no manifest, no build lock). With a new node offering the resource,
the same command resumes — it extracts only the chunks not done — and publishes an index equal BY CONTENT to a
clean one-node build (the crash matrix's guarantee: every graph row, mention counts included, every vector, the
manifest's counts; so nothing is counted twice).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.ray_cluster import TwoNodeCluster
from tests.integration.test_crash_matrix import _same_content
from tests.integration.test_index_cluster import PINNED
from tests.stand_ins import STAND_INS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "hxd2_ray" / "sample_data" / "corpus"
# One chunk per extraction batch (the sample corpus makes 39 of them), so the loss lands with some persisted.
SETTINGS = [
    *STAND_INS,
    "--set",
    "chunking.chunk_size_chars=300",
    "--set",
    "ray.ner_batch_size=1",
    "--set",
    "ray.embed_batch_size=64",
    "--set",
    "embedding.dim=32",
]
WAIT_S = 10  # ray.resource_wait_s: how long the job waits for a node offering the pinned resource
ENDS_WITHIN_S = 150  # after the kill: Ray's heartbeat timeout (~15 s here), WAIT_S, the stage's shutdown, slack


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    for path in SAMPLE.iterdir():
        shutil.copy(path, folder / path.name)
    return folder


@pytest.fixture(scope="module")
def cluster():
    started = TwoNodeCluster(second_node_resources={"second_node": 4}).start()
    try:
        yield started
    finally:
        started.stop()
        assert started.processes() == []


def _start(cluster: TwoNodeCluster, corpus: Path, out: Path, logs: Path) -> subprocess.Popen:
    """The pinned index job as its own driver process, its stdout and stderr into ``logs``."""
    cmd = [
        sys.executable,
        "-m",
        "jobs.index",
        "--input",
        str(corpus),
        "--output",
        str(out),
        *SETTINGS,
        *PINNED,
        "--set",
        f"ray.resource_wait_s={WAIT_S}",
        "--set",
        f"ray.address={cluster.address}",
        "--json",
    ]
    logs.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env={**cluster.env(), "PYTHONPATH": str(ROOT)},
        stdout=(logs / "stdout").open("w"),
        stderr=(logs / "stderr").open("w"),
        text=True,
    )


def _parts(out: Path) -> list[Path]:
    return sorted((out / "_staging" / "extractions").glob("part-*.parquet"))


def test_a_worker_node_lost_mid_extract_fails_the_job_in_bounded_time_and_the_rerun_equals_a_clean_build(
    ray_local, cluster, corpus, tmp_path, capsys
):
    from jobs import index as index_job

    clean = tmp_path / "clean"
    assert index_job.main(["--input", str(corpus), "--output", str(clean), *SETTINGS, "--set", "ray.num_cpus=2"]) == 0
    capsys.readouterr()
    total = pq.read_metadata(next(clean.glob("generations/*/tables/chunks.parquet"))).num_rows

    out, first = tmp_path / "index", tmp_path / "first-run"
    proc = _start(cluster, corpus, out, first)
    deadline = time.monotonic() + 300
    while not _parts(out):  # the extract stage is under way on the second node: its first batch is persisted
        assert proc.poll() is None, f"the job ended before extracting:\n{(first / 'stderr').read_text()[-3000:]}"
        assert time.monotonic() < deadline, "no extraction batch was persisted within 300 s"
        time.sleep(0.02)
    # The node freezes at once (nothing more lands), then dies: every process of it, the extraction actor included.
    assert cluster.kill_second_node(signal.SIGSTOP)
    done_at_loss = len(_parts(out))
    assert len(cluster.kill_second_node()) > 2  # raylet, log monitor, and the workers and agents under the raylet
    lost_at = time.monotonic()
    try:
        code = proc.wait(timeout=ENDS_WITHIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(
            f"the job still ran {ENDS_WITHIN_S}s after losing its pinned node:\n{(first / 'stderr').read_text()}"
        )
    ended_after = time.monotonic() - lost_at
    err = (first / "stderr").read_text()

    # One error line, naming the stage, the missing resource and the fix; stdout holds no summary.
    assert code == 2, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err[-3000:]
    assert errors[0].startswith(f"error: extract: for {WAIT_S}s no alive node of the Ray cluster could host"), errors
    assert "none offers second_node 1" in errors[0] and "ray start --resources" in errors[0], errors
    assert "rerun the same command" in errors[0], errors
    assert (first / "stdout").read_text() == ""
    assert ended_after > WAIT_S, f"ended {ended_after:.0f}s after the loss, before its wait for the resource"
    # Resumable: the batches persisted before the loss are kept, nothing was published, the build lock is free.
    assert done_at_loss <= len(_parts(out)) < total, (done_at_loss, len(_parts(out)), total)
    assert not (out / "manifest.json").exists()
    assert not (out / ".hxd2-build.lock").exists()
    done = sum(pq.read_metadata(part).num_rows for part in _parts(out))

    # A node offering the resource again (a new one, in the lost one's place); the same command resumes.
    cluster.start_second_node()
    again = tmp_path / "rerun"
    proc = _start(cluster, corpus, out, again)
    code = proc.wait(timeout=600)
    err = (again / "stderr").read_text()
    assert code == 0, err[-3000:]
    summary = json.loads((again / "stdout").read_text())
    assert summary["stage_status"]["extract"] == f"ran on {total - done} of {total} chunks", (summary, done)
    assert summary["cluster"]["nodes_checked"] == 2 and len(summary["cluster"]["writer_nodes"]) == 1
    _same_content(out, clean)
    print(f"node lost with {done_at_loss}/{total} chunks extracted; the job ended {ended_after:.1f}s later")
