"""Which config a command runs with: an existing index brings its own, a new index gets the shipped default models,
and the test stand-ins are used only when named (issue 40, item 3)."""

from __future__ import annotations

import json

import pytest

from hxd2_ray.config import SHIPPED_CONFIG, load_config, load_shipped_config, stand_ins
from hxd2_ray.errors import ConfigError, IndexNotFoundError
from hxd2_ray.index_store.manifest import build_manifest, read_manifest, write_manifest
from hxd2_ray.retrieval.query_config import load_query_config

OPENAI = {"llm": {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "K"}}


def _index_built_with(root, data, overrides=()):
    from hxd2_ray.config import config_from_data

    cfg = config_from_data(data, overrides)
    write_manifest(root, build_manifest(cfg, "test-prompts", {}, {}))
    return root


def test_overrides_apply_to_the_recorded_config_not_to_the_defaults(tmp_path):
    """`--set llm.base_url=...` on an index built with the openai backend: a key of that backend (the defaults'
    scripted LLM has no base_url, and the overrides used to be checked against it)."""
    root = _index_built_with(tmp_path / "idx", {**OPENAI, "embedding": {"backend": "hashing", "dim": 32}})
    cfg = load_query_config(str(root), None, ["llm.base_url=http://127.0.0.1:8/v1", "llm.model=other"])
    assert cfg.llm.backend == "openai"
    assert (cfg.llm.base_url, cfg.llm.model) == ("http://127.0.0.1:8/v1", "other")
    assert cfg.embedding.backend == "hashing" and cfg.embedding.dim == 32


def test_a_given_config_wins_over_the_recorded_one(tmp_path):
    root = _index_built_with(tmp_path / "idx", OPENAI)
    assert load_query_config(str(root), str(SHIPPED_CONFIG), []).llm.backend == "vllm"


def test_a_new_index_gets_the_shipped_default_models_and_an_existing_one_its_own(tmp_path):
    new = load_query_config(str(tmp_path / "new"), None, ["ray.num_cpus=1"], new_index=True)
    assert (new.llm.backend, new.embedding.backend) == ("vllm", "flag")
    assert new == load_shipped_config(["ray.num_cpus=1"])
    assert stand_ins(new) == []
    with pytest.raises(IndexNotFoundError):  # a query needs an index
        load_query_config(str(tmp_path / "new"), None, [])
    root = _index_built_with(
        tmp_path / "idx", {"llm": {"backend": "scripted"}, "embedding": {"backend": "hashing"}, "ray": {"num_cpus": 1}}
    )
    existing = load_query_config(str(root), None, [], new_index=True, keep_ray=True)
    assert (existing.llm.backend, existing.embedding.backend, existing.ray.num_cpus) == ("scripted", "hashing", 1)
    assert load_query_config(str(root), None, []).ray.num_cpus != 1  # a query leaves the build machine's section
    assert len(stand_ins(existing)) == 2


def test_the_shipped_config_is_configs_local_yaml(tmp_path):
    from pathlib import Path

    repo_copy = Path(__file__).resolve().parents[2] / "configs" / "local.yaml"
    assert repo_copy.resolve() == SHIPPED_CONFIG.resolve()


def test_an_override_naming_another_backend_starts_that_section_afresh():
    cfg = load_shipped_config(["llm.backend=scripted", "embedding.backend=hashing", "embedding.dim=64"])
    assert (cfg.llm.backend, cfg.embedding.backend, cfg.embedding.dim) == ("scripted", "hashing", 64)
    same = load_shipped_config(["llm.backend=vllm", "llm.max_model_len=2048"])  # the same backend keeps its keys
    assert same.llm.model_id == "SmolLM2-135M-Instruct" and same.llm.max_model_len == 2048
    with pytest.raises(ConfigError, match="unknown key"):  # a key of the old backend, given after the switch
        load_config(None, ["embedding.backend=hashing", "embedding.pooling_method=mean"])


def test_calibrate_refusal_runs_on_the_index_config_and_gates_with_its_rule(tmp_path, capsys):
    """No --config: the index's embedder (dimension 48 here, not the defaults' 64) and its refusal rule."""
    from hxd2_ray.config import MultiStageConfig
    from jobs import calibrate
    from tests.unit.retrieval_fixtures import build_tiny_index

    tiny = build_tiny_index(tmp_path / "idx", dim=48)
    manifest = read_manifest(tiny.root / "manifest.json")
    cfg = tiny.cfg.model_copy(update={"multistage": MultiStageConfig(refusal_rule="question")})
    write_manifest(tiny.root, manifest.model_copy(update={"config": cfg.model_dump(mode="json")}))
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text(json.dumps({"question": "Who discovered synaptotagmin?"}) + "\n")
    bad.write_text(json.dumps({"question": "What is the capital of Australia?"}) + "\n")
    out = tmp_path / "cal"
    code = calibrate.main(["--index", str(tiny.root), "--good", str(good), "--bad", str(bad), "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert json.loads((out / "calibration.json").read_text())["rule"] == "question"
