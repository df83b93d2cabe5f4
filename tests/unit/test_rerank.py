"""The reranker seam: the deterministic overlap backend, the FlagReranker adapter (its model object replaced, since
no reranker weights can be installed here), wiring, and the pipeline reordering its top candidates."""

from __future__ import annotations

import math

import pytest

from hxd2_ray.config import FlagRerankerConfig, HxdConfig, NoRerankerConfig, OverlapRerankerConfig, load_config
from hxd2_ray.errors import ConfigError
from hxd2_ray.rerank.flag_reranker import FlagRerankerBackend, check_model_folder
from hxd2_ray.rerank.overlap import OverlapReranker
from hxd2_ray.wiring import build_reranker


def test_overlap_scores_the_share_of_query_words_found():
    r = OverlapReranker()
    assert r.score(
        "Who founded Neosensory?", ["Neosensory was founded by David Eagleman.", "Eagleman founded it.", ""]
    ) == pytest.approx([2 / 3, 1 / 3, 0.0])
    assert r.score("青禾17号", ["青禾17号是水稻品种", "小麦"]) == [1.0, 0.0]
    assert r.score("?!", ["anything"]) == [0.0]
    with pytest.raises(TypeError):
        r.score("q", "a single string")


def test_wiring_builds_each_backend():
    assert build_reranker(NoRerankerConfig()) is None
    assert isinstance(build_reranker(OverlapRerankerConfig()), OverlapReranker)
    assert HxdConfig().rerank == NoRerankerConfig()
    cfg = load_config(None, ["rerank={backend: overlap}"])
    assert isinstance(cfg.rerank, OverlapRerankerConfig)
    with pytest.raises(ConfigError, match="rerank"):
        load_config(None, ["rerank={backend: cohere}"])


def test_missing_weights_fail_at_construction_with_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="reranker model folder not found.*rerank.backend=none"):
        build_reranker(FlagRerankerConfig(model=str(tmp_path / "bge-reranker-v2-m3")))
    folder = tmp_path / "half"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="lacks weights"):
        check_model_folder(str(folder))
    (folder / "model.safetensors").write_bytes(b"")
    assert check_model_folder(str(folder)) == folder


class _FakeFlagModel:
    """Stands in for FlagEmbedding.FlagReranker: records calls, scores by passage length."""

    def __init__(self, single_as_float=False, bad=None):
        self.calls = []
        self.single_as_float = single_as_float
        self.bad = bad

    def compute_score(self, pairs, **kwargs):
        self.calls.append((pairs, kwargs))
        if self.bad == "short":
            return [0.5]
        if self.bad == "nan":
            return [math.nan] * len(pairs)
        scores = [float(len(p)) for _, p in pairs]
        return scores[0] if self.single_as_float and len(scores) == 1 else scores


def test_flag_adapter_passes_pairs_and_reads_both_result_shapes():
    cfg = FlagRerankerConfig(model="/models/bge-reranker-v2-m3", batch_size=8, max_length=256)
    fake = _FakeFlagModel()
    r = FlagRerankerBackend(cfg, model=fake)
    assert r.model_id == "bge-reranker-v2-m3"
    assert r.score("q", ["aa", "", "b"]) == [2.0, 1.0, 1.0]  # a blank passage is sent as one space
    pairs, kwargs = fake.calls[0]
    assert pairs == [("q", "aa"), ("q", " "), ("q", "b")]
    assert kwargs == {"batch_size": 8, "max_length": 256, "normalize": True}
    assert r.score("q", []) == [] and len(fake.calls) == 1  # nothing to score: no model call
    single = FlagRerankerBackend(cfg, model=_FakeFlagModel(single_as_float=True))
    assert single.score("q", ["abc"]) == [3.0]
    with pytest.raises(ValueError, match="1 scores for 2 passages"):
        FlagRerankerBackend(cfg, model=_FakeFlagModel(bad="short")).score("q", ["a", "b"])
    with pytest.raises(ValueError, match="non-finite"):
        FlagRerankerBackend(cfg, model=_FakeFlagModel(bad="nan")).score("q", ["a"])
    r.close()
    with pytest.raises(RuntimeError, match="closed"):
        r.score("q", ["a"])


def test_gpu_config_names_bge_reranker_and_local_has_none():
    from pathlib import Path

    configs = Path(__file__).resolve().parents[2] / "configs"
    gpu = load_config(configs / "gpu.yaml")
    assert isinstance(gpu.rerank, FlagRerankerConfig) and gpu.rerank.model.endswith("bge-reranker-v2-m3")
    assert isinstance(load_config(configs / "local.yaml").rerank, NoRerankerConfig)
