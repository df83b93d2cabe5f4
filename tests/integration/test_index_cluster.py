"""The index job on a real two-node Ray cluster (a head and a second ``ray start --address`` node on this machine).

The LLM and embedding stages are pinned to the second node through a custom resource only it offers, so their
files are written by another node than the driver's. With a shared output the index equals a one-node build;
with an output that is node-local on the second node (a private folder bound over the path in its own mount
namespace) the job refuses before the first stage, naming the fix — and with that check turned off, the driver's
check of the files the actors reported stops the job before anything is merged, the files still on that node.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.ray_cluster import TwoNodeCluster, can_unshare_mounts
from tests.integration.test_index_maintenance import _assert_same_index
from tests.stand_ins import STAND_INS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "hxd2_ray" / "sample_data" / "corpus"
FILES = ("brian_kobilka.txt", "david_eagleman.txt", "TAC4.md")
SETTINGS = [
    *STAND_INS,
    "--set",
    "ray.ner_batch_size=2",
    "--set",
    "ray.embed_batch_size=64",
    "--set",
    "embedding.dim=64",
]
PINNED = [
    "--set",
    "ray.stage_resources={second_node: 1}",
    "--set",
    "ray.cpus_per_ner_actor=0.5",
    "--set",
    "ray.cpus_per_embed_actor=0.5",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    for name in FILES:
        shutil.copy(SAMPLE / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def node_local_output(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("node_local") / "index"


@pytest.fixture(scope="module")
def cluster(node_local_output):
    local = [node_local_output] if can_unshare_mounts() else []
    started = TwoNodeCluster(second_node_resources={"second_node": 4}, node_local=local).start()
    try:
        yield started
    finally:
        started.stop()
        assert started.processes() == []


def _job(cluster: TwoNodeCluster, *args: str) -> tuple[int, dict | None, str]:
    """The index job as its own driver process, connected to the cluster."""
    cmd = [sys.executable, "-m", "jobs.index", *args, *SETTINGS, "--set", f"ray.address={cluster.address}", "--json"]
    done = subprocess.run(
        cmd, cwd=ROOT, env={**cluster.env(), "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=900
    )
    summary = json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else None
    return done.returncode, summary, done.stderr


def test_two_nodes_build_the_index_one_node_builds(ray_local, cluster, corpus, tmp_path, capsys):
    from jobs import index as index_job

    one = tmp_path / "one_node"
    assert index_job.main(["--input", str(corpus), "--output", str(one), *SETTINGS, "--set", "ray.num_cpus=2"]) == 0
    capsys.readouterr()
    two = tmp_path / "two_nodes"
    code, summary, err = _job(cluster, "--input", str(corpus), "--output", str(two), *PINNED)
    assert code == 0, err[-4000:]
    assert summary["cluster"]["nodes_checked"] == 2
    # The pinned stages ran on the second node only, and every file they reported was found by the driver.
    assert len(summary["cluster"]["writer_nodes"]) == 1 and summary["cluster"]["files_checked"] > 0
    _assert_same_index(two, one)


@pytest.mark.skipif(not can_unshare_mounts(), reason="needs mount namespaces (unshare -m) to make a node-local path")
def test_a_node_local_output_is_refused_before_any_work_and_the_index_there_is_untouched(
    ray_local, cluster, corpus, node_local_output, capsys
):
    from jobs import index as index_job

    # An index the driver's node holds at that path (built without the cluster).
    assert (
        index_job.main(
            [
                "--input",
                str(corpus / "TAC4.md"),
                "--output",
                str(node_local_output),
                *SETTINGS,
                "--set",
                "ray.num_cpus=2",
            ]
        )
        == 0
    )
    capsys.readouterr()
    manifest = (node_local_output / "manifest.json").read_text()

    code, _, err = _job(cluster, "--input", str(corpus), "--output", str(node_local_output), *PINNED)
    assert code == 2, err[-3000:]
    assert "not the same on every node" in err and "s3://" in err and "mounted at the same path on every node" in err
    assert (node_local_output / "manifest.json").read_text() == manifest
    private = Path(cluster.private[str(node_local_output)])
    assert not list(private.rglob("*.parquet"))  # nothing was started on the second node

    # Without the early check, the actors' files land on the second node's disk: the driver's check of what they
    # reported stops the job before anything is merged; their files are still there, the index is unchanged.
    code, _, err = _job(
        cluster, "--input", str(corpus), "--output", str(node_local_output), *PINNED, "--set", "ray.check_nodes=false"
    )
    assert code == 2, err[-3000:]
    assert "files the extract actors reported writing are not readable" in err and "s3://" in err
    assert (node_local_output / "manifest.json").read_text() == manifest
    assert list(private.rglob("extractions/part-*.parquet"))
    from hxd2_ray.config import load_config
    from hxd2_ray.retrieval.index import open_index

    with open_index(str(node_local_output), load_config(None, ["embedding.dim=64"])) as index:
        assert index.manifest.counts["documents"] == 1


def test_the_cluster_keeps_to_its_own_folder(cluster):
    # Its address file is in its private folder: a plain ray.init() elsewhere on this machine never finds it.
    port = cluster.address.rsplit(":", 1)[1]
    assert (Path(cluster.temp_dir) / "ray_current_cluster").read_text().strip().endswith(f":{port}")
    default = Path("/tmp/ray/ray_current_cluster")
    assert not default.exists() or not default.read_text().strip().endswith(f":{port}")
    assert cluster.processes()  # what stop() will end: every process naming the folder
