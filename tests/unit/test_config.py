"""Typed config: YAML + overrides, errors that list valid values, and the index fingerprint."""

from __future__ import annotations

from pathlib import Path

import pytest

from hxd2_ray.config import ConfigError, HxdConfig, VllmLLMConfig, load_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("name", ["local.yaml", "gpu.yaml", "gpu-single.yaml"])
def test_shipped_configs_load(name):
    cfg = load_config(CONFIGS / name)
    assert isinstance(cfg.llm, VllmLLMConfig)
    assert cfg.embedding.backend == "flag"


def test_gpu_config_names_the_production_models():
    cfg = load_config(CONFIGS / "gpu.yaml")
    assert cfg.llm.model_id == "Qwen2.5-7B-Instruct" and cfg.llm.max_model_len == 32768
    assert cfg.embedding.model_id == "bce-embedding-base_v1" and cfg.embedding.dim == 768
    assert cfg.embedding.pooling_method == "cls"
    assert cfg.ray.gpus_per_ner_actor >= 1 and cfg.ray.ner_actors > 1


def test_gpu_single_config_runs_one_7b_engine_on_one_gpu():
    cfg = load_config(CONFIGS / "gpu-single.yaml")
    assert isinstance(cfg.llm, VllmLLMConfig) and cfg.llm.model.startswith("/") and cfg.llm.dtype == "bfloat16"
    assert cfg.llm.tensor_parallel_size == 1 == cfg.ray.ner_actors and cfg.ray.gpus_per_ner_actor == 1
    assert cfg.ray.ner_batch_size >= cfg.llm.max_num_seqs and 0 < cfg.llm.gpu_memory_utilization <= 0.9
    assert cfg.retrieval.answer_reserve_tokens < cfg.llm.max_model_len <= 32768  # Qwen2.5-7B's native context
    assert cfg.embedding.model == "builtin:minilm" and cfg.embedding.dim == 384


def test_unknown_key_lists_the_valid_keys():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["chunking.chunk_size=10"])
    assert "chunking.chunk_size: unknown key" in str(err.value)
    assert "chunk_size_chars" in str(err.value) and "overlap_chars" in str(err.value)


def test_unknown_key_inside_a_backend_lists_that_backends_keys():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["llm.backend=vllm", "llm.tensor_parallel=2"])
    assert "tensor_parallel_size" in str(err.value)


def test_bad_choice_lists_the_valid_values():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["extraction.loop_ner=sometimes"])
    assert "'base' or 'trial'" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(None, ["llm.backend=anthropic"])
    assert "'scripted', 'vllm', 'openai'" in str(err.value)


def test_bad_values_and_malformed_overrides_are_errors():
    with pytest.raises(ConfigError):
        load_config(None, ["chunking.overlap_chars=900"])  # overlap must be below the chunk size
    with pytest.raises(ConfigError):
        load_config(None, ["chunking.chunk_size_chars"])
    with pytest.raises(ConfigError):
        load_config("/nonexistent.yaml")


def test_config_is_frozen():
    cfg = HxdConfig()
    with pytest.raises(Exception):
        cfg.chunking.chunk_size_chars = 10  # type: ignore[misc]


def test_a_backend_override_without_its_tag_keeps_the_default_backend():
    cfg = load_config(None, ["embedding.dim=32"])
    assert cfg.embedding.backend == "hashing" and cfg.embedding.dim == 32


def test_fingerprint_follows_what_shapes_the_index():
    base = HxdConfig()
    fp = base.index_fingerprint("v1-aaa")
    assert fp == HxdConfig().index_fingerprint("v1-aaa")
    assert fp != base.index_fingerprint("v1-bbb")  # prompt edits change the fingerprint
    assert fp != load_config(None, ["chunking.chunk_size_chars=512"]).index_fingerprint("v1-aaa")
    assert fp != load_config(None, ["embedding.dim=32"]).index_fingerprint("v1-aaa")
    # Query-time settings do not force a rebuild.
    assert fp == load_config(None, ["retrieval.top_k_entities=9"]).index_fingerprint("v1-aaa")
    assert fp == load_config(None, ["ray.ner_actors=4"]).index_fingerprint("v1-aaa")
