"""graph.backend: the engine module (kuzu | ladybug), its errors, the manifest's record of the engine, and the store
contract on LadybugDB, which runs in a process of its own (the two engines cannot share one)."""

from __future__ import annotations

import os
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

from hxd2_ray.config import GraphConfig, HxdConfig
from hxd2_ray.errors import IndexMismatchError
from hxd2_ray.graph import engine as engine_module
from hxd2_ray.graph.engine import GRAPH_BACKENDS, GraphEngineError, graph_engine
from hxd2_ray.index_store.manifest import build_manifest, check_compatible

ROOT = Path(__file__).resolve().parents[2]


def test_backends_are_the_config_values_and_kuzu_is_the_default():
    assert GRAPH_BACKENDS == typing.get_args(GraphConfig.model_fields["backend"].annotation)
    assert HxdConfig().graph.backend == "kuzu" == engine_module.DEFAULT_GRAPH_BACKEND


def test_unknown_backend_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown graph backend 'neo4j'; valid: kuzu, ladybug"):
        graph_engine("neo4j")


def test_the_other_engine_in_this_process_is_one_clear_error():
    assert graph_engine("kuzu").name == "kuzu"  # this process runs the store tests on Kùzu
    with pytest.raises(GraphEngineError, match="already loaded kuzu.*cannot share a process"):
        graph_engine("ladybug")


def test_a_module_named_ladybug_that_is_not_the_database_is_one_clear_error(monkeypatch):
    """ladybug-core (a weather-data library) installs a module ``ladybug`` too."""
    impostor = types.ModuleType("ladybug")
    impostor.__file__ = "/site-packages/ladybug/__init__.py"
    monkeypatch.setitem(sys.modules, "ladybug", impostor)
    monkeypatch.delitem(sys.modules, "kuzu._kuzu", raising=False)  # as if Kùzu were not loaded here
    monkeypatch.setattr(engine_module, "_engines", {})
    with pytest.raises(GraphEngineError, match="not the graph database.*ladybug-core.*pip install ladybug"):
        graph_engine("ladybug")


def test_the_index_fingerprint_counts_the_engine_and_kuzu_keeps_the_old_one():
    kuzu, ladybug = HxdConfig(), HxdConfig(graph=GraphConfig(backend="ladybug"))
    assert kuzu.index_fingerprint("p") != ladybug.index_fingerprint("p")
    assert kuzu.staging_fingerprint("p") == ladybug.staging_fingerprint("p")  # a switch rebuilds only the write
    # indexes built before the option (all Kùzu) keep their fingerprint: the default adds nothing to it
    assert "graph" not in _graph_factors(kuzu) and _graph_factors(ladybug)["graph"] == {"backend": "ladybug"}


def _graph_factors(cfg: HxdConfig) -> dict:
    from hxd2_ray.config.base import fingerprint_factors

    factors = fingerprint_factors(cfg, "graph")
    if factors.get("graph") == {"backend": "kuzu"}:
        del factors["graph"]
    return factors


def test_the_manifest_records_the_engine_and_a_reader_of_the_other_is_refused():
    cfg = HxdConfig(graph=GraphConfig(backend="ladybug"))
    manifest = build_manifest(cfg, "p", {}, {})
    assert manifest.graph_backend == "ladybug" and manifest.graph_engine_version == "0.22.0"
    check_compatible(manifest, manifest.embedding_model_id, manifest.embedding_dim, "ladybug")
    check_compatible(manifest, manifest.embedding_model_id, manifest.embedding_dim)  # no engine given: not checked
    with pytest.raises(IndexMismatchError, match="written by ladybug.*reads graphs with kuzu.*graph.backend=ladybug"):
        check_compatible(manifest, manifest.embedding_model_id, manifest.embedding_dim, "kuzu")
    old = manifest.model_validate({k: v for k, v in manifest.model_dump().items() if k != "graph_backend"})
    assert old.graph_backend == "kuzu"  # a manifest written before the option is Kùzu's


def _on_ladybug(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HXD2_TEST_GRAPH_BACKEND": "ladybug"}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_store_contract_on_ladybug():
    """test_kuzu_store and the store contract (resident copy included), again on LadybugDB."""
    proc = _on_ladybug(
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/unit/test_kuzu_store.py",
        "tests/unit/test_graph_store_contract.py",
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout.split("short test summary")[-1]


_WRITE = """
import sys
from tests.unit.test_kuzu_store import load_graph, _docs, _chunks, _ents, _rels, _ent
load_graph(sys.argv[1], _docs([]), _chunks([]), _ents([_ent("a")]), _rels([]))
print("written")
"""


def test_a_graph_written_by_ladybug_is_refused_by_kuzu_naming_both(tmp_path):
    from hxd2_ray.graph.kuzu_store import KuzuGraphStore

    path = tmp_path / "graph.kuzu"
    proc = _on_ladybug("-c", _WRITE, str(path))
    assert proc.returncode == 0 and "written" in proc.stdout, proc.stderr[-2000:]
    with pytest.raises(IndexMismatchError, match="cannot be read by kuzu.*written by ladybug"):
        KuzuGraphStore(path, engine="kuzu")
