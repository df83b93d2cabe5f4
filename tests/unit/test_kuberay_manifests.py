"""The KubeRay manifests hold against KubeRay's own CRDs (types and undeclared fields), and the image they run is the
one ``cluster/Dockerfile`` builds, pinned as ``pyproject.toml`` pins it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((REPO / "cluster" / "kuberay").glob("*.yaml"))


def _checker():
    spec = importlib.util.spec_from_file_location("check_manifests", REPO / "cluster" / "check_manifests.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = _checker()


def _broken_copy(tmp_path: Path, name: str, edit) -> Path:
    docs = list(yaml.safe_load_all((REPO / "cluster" / "kuberay" / name).read_text(encoding="utf-8")))
    edit(docs[0])
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
    return path


def test_the_shipped_manifests_are_valid():
    assert {p.name for p in MANIFESTS} >= {"rayjob.yaml", "rayservice.yaml"}
    for path in MANIFESTS:
        assert check.check_file(path) == [], path


def _workers(doc):
    spec = doc["spec"].get("rayClusterSpec") or doc["spec"]["rayClusterConfig"]
    return spec["workerGroupSpecs"][0]


@pytest.mark.parametrize("name", ["rayjob.yaml", "rayservice.yaml"])
def test_a_misspelt_field_fails_though_its_type_would_pass(tmp_path, name):
    def misspell(doc):
        workers = _workers(doc)
        workers["replcas"] = workers.pop("replicas")

    problems = check.check_file(_broken_copy(tmp_path, name, misspell))
    assert any("replcas" in p and "does not declare" in p for p in problems), problems
    assert check.main([str(tmp_path / name)]) == 1


def test_a_wrong_type_fails(tmp_path):
    def wrong_type(doc):
        _workers(doc)["maxReplicas"] = "eight"

    problems = check.check_file(_broken_copy(tmp_path, "rayjob.yaml", wrong_type))
    assert any("maxReplicas" in p and "integer" in p for p in problems), problems


def test_a_misspelt_top_level_spec_field_fails(tmp_path):
    def misspell(doc):
        doc["spec"]["shutdownAfterJobFinish"] = doc["spec"].pop("shutdownAfterJobFinishes")

    problems = check.check_file(_broken_copy(tmp_path, "rayjob.yaml", misspell))
    assert any("shutdownAfterJobFinish" in p for p in problems), problems


def test_images_ray_version_and_serve_args_are_checked(tmp_path):
    def drift(doc):
        doc["spec"]["rayClusterConfig"]["rayVersion"] = "2.9.0"
        _workers(doc)["template"]["spec"]["containers"][0]["image"] = "registry.example.com/hxd2-ray:latest"
        doc["spec"]["serveConfigV2"] = doc["spec"]["serveConfigV2"].replace("max_body_bytes:", "max_body_byte:")

    problems = check.check_file(_broken_copy(tmp_path, "rayservice.yaml", drift))
    assert any("rayVersion" in p and "pins ray" in p for p in problems), problems
    assert any(".image:" in p and "${HXD2_IMAGE}" in p for p in problems), problems
    assert any("max_body_byte" in p for p in problems), problems


def test_the_dockerfile_builds_the_pinned_ray_and_python():
    dockerfile = (REPO / "cluster" / "Dockerfile").read_text(encoding="utf-8")
    base = re.search(r"^ARG BASE=rayproject/ray:([0-9.]+)-py(\d)(\d+)", dockerfile, re.MULTILINE)
    assert base, "cluster/Dockerfile names no rayproject/ray base image"
    assert base[1] == check.pinned_ray_version()
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    python = re.search(r'requires-python = ">=(\d+)\.(\d+)', pyproject)
    assert python and (base[2], base[3]) == (python[1], python[2])
    assert 'pip install --no-cache-dir ".[gpu]"' in dockerfile  # the dependencies are pyproject's own pins
