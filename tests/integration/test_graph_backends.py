"""graph.backend=ladybug builds the sample corpus into an index with the same counts as Kùzu, and ``hxd2 query``
answers the same question with the same answer and references. Each build and query runs as its own ``hxd2``
process: the two engines cannot share one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stand_ins import STAND_IN_OVERRIDES

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "hxd2_ray" / "sample_data" / "corpus"
OVERRIDES = [
    *STAND_IN_OVERRIDES,
    "ray.num_cpus=2",
    "ray.ner_batch_size=4",
    "embedding.dim=64",
    "vectors.index_type=flat",
]
QUESTION = "Which prize did Brian Kobilka win?"


def _hxd2(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _sets(backend: str) -> list[str]:
    return [arg for item in [*OVERRIDES, f"graph.backend={backend}"] for arg in ("--set", item)]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("backends")
    corpus = work / "corpus"
    corpus.mkdir()
    for name in ("brian_kobilka.txt", "david_eagleman.txt", "robert_malenka.txt"):
        shutil.copy(SAMPLE / name, corpus / name)
    out = {}
    for backend in ("kuzu", "ladybug"):
        out[backend] = work / backend
        proc = _hxd2("index", "--input", str(corpus), "--output", str(out[backend]), *_sets(backend), "--json")
        assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_ladybug_builds_the_same_index_as_kuzu(built):
    manifests = {b: json.loads((p / "manifest.json").read_text()) for b, p in built.items()}
    assert manifests["kuzu"]["graph_backend"] == "kuzu" and manifests["ladybug"]["graph_backend"] == "ladybug"
    assert manifests["ladybug"]["graph_engine_version"] == "0.22.0"
    assert manifests["kuzu"]["counts"] == manifests["ladybug"]["counts"]
    assert manifests["kuzu"]["counts"]["entities"] > 0 and manifests["kuzu"]["counts"]["relations"] > 0
    assert manifests["kuzu"]["fingerprint"] != manifests["ladybug"]["fingerprint"]
    stats = {}
    for backend, path in built.items():  # the graph as the engine reads it back, through hxd2 graph stats
        proc = _hxd2("graph", "stats", "--index", str(path), "--output", str(path / "_stats"), "--json")
        assert proc.returncode == 0, proc.stderr[-3000:]
        stats[backend] = json.loads((path / "_stats" / "stats.json").read_text())
    assert stats["kuzu"]["counts"] == stats["ladybug"]["counts"]
    assert stats["kuzu"]["degree"] == stats["ladybug"]["degree"]


def test_ladybug_answers_the_same_as_kuzu(built):
    answers = {}
    for backend, path in built.items():
        proc = _hxd2("query", "--index", str(path), *_sets(backend), "--json", QUESTION)
        assert proc.returncode == 0, proc.stderr[-3000:]
        answers[backend] = json.loads(proc.stdout)
    assert answers["kuzu"]["answer"] == answers["ladybug"]["answer"]
    assert answers["kuzu"]["references"] == answers["ladybug"]["references"] != []
    assert answers["kuzu"]["path"] == answers["ladybug"]["path"]


def test_reading_with_the_other_engine_is_one_line_naming_both(built):
    proc = _hxd2("query", "--index", str(built["ladybug"]), *_sets("kuzu"), QUESTION)
    assert proc.returncode != 0
    assert "written by ladybug" in proc.stderr and "graph.backend=ladybug" in proc.stderr
    assert "Traceback" not in proc.stderr
