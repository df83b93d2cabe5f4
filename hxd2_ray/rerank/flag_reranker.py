"""FlagEmbedding's ``FlagReranker`` (bge-reranker-v2-m3 and other encoder-only cross-encoders) behind
:class:`~hxd2_ray.rerank.base.Reranker`.

torch and FlagEmbedding are imported when an instance is created, so importing this module stays cheap. Model
folders are local only (the hub is never asked): a missing or incomplete folder fails at construction with
what to do about it, not on the first question.
"""

from __future__ import annotations

import gc
import logging
import math
import os
from pathlib import Path
from typing import Any, Sequence

from hxd2_ray.config import FlagRerankerConfig
from hxd2_ray.errors import ConfigError

log = logging.getLogger(__name__)

# What a transformers sequence-classification folder needs besides its weights.
_REQUIRED = ("config.json",)
_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")


def reranker_model_id(cfg: FlagRerankerConfig) -> str:
    return cfg.model_id or cfg.model.rstrip("/").rsplit("/", 1)[-1]


def check_model_folder(model: str) -> Path:
    """The local folder of a reranker, or ConfigError naming what is missing and how to turn reranking off."""
    path = Path(model).expanduser()
    hint = (
        "rerank.model must be a local folder holding a cross-encoder (e.g. bge-reranker-v2-m3: config.json, "
        "tokenizer files and model.safetensors); models are never downloaded at run time. Without one, set "
        "rerank.backend=none"
    )
    if not path.is_dir():
        raise ConfigError(f"reranker model folder not found: {model!r}. {hint}")
    missing = [f for f in _REQUIRED if not (path / f).is_file()]
    if missing or not any((path / w).is_file() for w in _WEIGHTS):
        what = ", ".join(missing + ([] if any((path / w).is_file() for w in _WEIGHTS) else ["weights"]))
        raise ConfigError(f"reranker model folder {str(path)!r} lacks {what}. {hint}")
    return path


class FlagRerankerBackend:
    """Cross-encoder scores on one device through ``FlagEmbedding.FlagReranker``."""

    def __init__(self, cfg: FlagRerankerConfig, model: Any = None) -> None:
        """``model``: an already-built object with FlagReranker's ``compute_score`` (tests); None loads it."""
        self.cfg = cfg
        self.model_id = reranker_model_id(cfg)
        if model is None:
            path = check_model_folder(cfg.model)
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            import torch
            from FlagEmbedding import FlagReranker

            device = cfg.device or ("cuda:0" if torch.cuda.is_available() else "cpu")
            # A single-element device list: FlagEmbedding starts a multi-process pool for several devices.
            model = FlagReranker(
                str(path),
                use_fp16=cfg.use_fp16,
                devices=[device],
                batch_size=cfg.batch_size,
                max_length=cfg.max_length,
                normalize=cfg.normalize,
            )
            self.device = device
        else:
            self.device = cfg.device or "cpu"
        self._model: Any = model

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        if isinstance(passages, str):
            raise TypeError("score() takes a sequence of passages, not a single string")
        if self._model is None:
            raise RuntimeError("FlagRerankerBackend is closed")
        if not passages:
            return []
        pairs = [(query, p if isinstance(p, str) and p.strip() else " ") for p in passages]
        raw = self._model.compute_score(
            pairs, batch_size=self.cfg.batch_size, max_length=self.cfg.max_length, normalize=self.cfg.normalize
        )
        # FlagReranker returns a bare float for a single pair and a list otherwise.
        values = [raw] if isinstance(raw, (int, float)) else list(raw)
        if len(values) != len(passages):
            raise ValueError(f"the reranker returned {len(values)} scores for {len(passages)} passages")
        out = [float(v) for v in values]
        if not all(math.isfinite(v) for v in out):
            raise ValueError("the reranker returned a non-finite score")
        return out

    def close(self) -> None:
        model, self._model = self._model, None
        if model is None:
            return
        try:
            model.stop_self_pool()
        except Exception as exc:  # noqa: BLE001 - the model is dropped either way
            log.warning("stopping the reranker's worker pool failed: %s: %s", type(exc).__name__, exc)
        del model
        gc.collect()
