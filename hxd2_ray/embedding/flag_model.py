"""FlagEmbedding ``FlagModel`` behind the :class:`~hxd2_ray.embedding.base.Embedder` protocol.

Works for any encoder-only model folder (MiniLM with mean pooling, bge/bce with CLS pooling). torch and
FlagEmbedding are imported inside the class so that importing this module stays cheap.
"""

from __future__ import annotations

import gc
import importlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from hxd2_ray import models
from hxd2_ray.config import FlagEmbeddingConfig, embedding_model_id
from hxd2_ray.embedding.base import empty_embeddings, l2_normalize
from hxd2_ray.errors import ConfigError

log = logging.getLogger(__name__)

_POOLING_KEYS = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens"}
_SILENT_WRAPPERS: set[Callable[..., Any]] = set()  # the tqdm stand-ins already installed (rebinding is once)


def resolve_embedding_path(model: str) -> str:
    """``builtin:minilm`` → the bundled folder; anything else must be a local folder."""
    path = models.resolve_embedding_path(model)
    if not Path(path).is_dir():
        raise FileNotFoundError(f"embedding model folder not found: {model!r} (give a local folder or builtin:minilm)")
    return path


def _silence_flag_progress() -> None:
    """Force FlagEmbedding's tqdm bars off.

    ``encode_single_device`` shows "pre tokenize" / "Inference Embeddings" bars whenever a call has at
    least ``batch_size`` texts, and takes no argument to turn them off; in Ray actors they flood the
    driver's log. The module-level names are rebound once, to wrappers that pass ``disable=True``.
    """
    for module_name in (
        "FlagEmbedding.inference.embedder.encoder_only.base",
        "FlagEmbedding.abc.inference.AbsEmbedder",  # the multi-device pool's "initial target device" bar
    ):
        module = importlib.import_module(module_name)
        for name in ("tqdm", "trange"):
            original = getattr(module, name, None)
            if original is None or original in _SILENT_WRAPPERS:
                continue

            def silent(*args: Any, _orig: Any = original, **kwargs: Any) -> Any:
                kwargs["disable"] = True
                return _orig(*args, **kwargs)

            _SILENT_WRAPPERS.add(silent)
            setattr(module, name, silent)


def _model_max_length(path: str, requested: int) -> int:
    """Cap at the folder's sentence-transformers ``max_seq_length`` (MiniLM: 256) if it declares one.

    FlagModel would otherwise feed up to ``requested`` tokens, beyond what the model was trained on, and
    its vectors for long texts would differ from the model's own (sentence-transformers) output.
    """
    cfg_file = Path(path) / "sentence_bert_config.json"
    try:
        declared = int(json.loads(cfg_file.read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return requested
    return min(requested, declared)


def _check_pooling(path: str, pooling: str) -> None:
    """Warn when the folder's own pooling config disagrees with ``embedding.pooling_method``."""
    pool_file = Path(path) / "1_Pooling" / "config.json"
    try:
        declared = json.loads(pool_file.read_text())
    except (OSError, ValueError):
        return
    key = _POOLING_KEYS.get(pooling)
    if key is not None and declared.get(key) is False:
        modes = [k for k, v in declared.items() if k.startswith("pooling_mode_") and v is True]
        log.warning("embedding.pooling_method=%s but %s declares %s", pooling, pool_file, modes)


class FlagModelEmbedder:
    """Dense embeddings from a local encoder model via ``FlagEmbedding.FlagModel`` on one device."""

    def __init__(self, cfg: FlagEmbeddingConfig) -> None:
        self.cfg = cfg
        self.model_id = embedding_model_id(cfg)
        self.dim = cfg.dim
        self.model_path = resolve_embedding_path(cfg.model)
        self.max_length = _model_max_length(self.model_path, cfg.max_length)
        _check_pooling(self.model_path, cfg.pooling_method)
        # Local folders only; without these transformers may try the hub (and hang on an offline node).
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"

        import torch
        from FlagEmbedding import FlagModel

        _silence_flag_progress()
        # One device per embedder (a Ray actor owns one GPU or some CPUs). FlagModel's devices=None means
        # "every visible GPU" and starts a multi-process pool; a single-element list never does.
        self.device = cfg.device or ("cuda:0" if torch.cuda.is_available() else "cpu")
        from transformers.utils import logging as hf_logging

        # transformers 5 draws a "Loading weights" bar per load; off for the load only, then restored.
        bars_were_on = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            self._model: Any = FlagModel(
                self.model_path,
                use_fp16=cfg.use_fp16,  # FlagModel casts to float32 on CPU regardless
                devices=[self.device],
                pooling_method=cfg.pooling_method,
                normalize_embeddings=True,
                query_instruction_for_retrieval=None,
                passage_max_length=self.max_length,
                batch_size=cfg.batch_size,
            )
        finally:
            if bars_were_on:
                hf_logging.enable_progress_bar()
        produced = self._encode(["dimension probe"]).shape[1]
        if produced != cfg.dim:
            model = self.model_path
            self.close()
            raise ConfigError(
                f"embedding model {cfg.model!r} ({model}) produces {produced}-dimensional vectors, "
                f"but embedding.dim is {cfg.dim}; set embedding.dim={produced}"
            )

    def _encode(self, texts: list[str]) -> np.ndarray:
        out = self._model.encode(texts, batch_size=self.cfg.batch_size, max_length=self.max_length)
        if not isinstance(out, np.ndarray):  # a torch tensor if convert_to_numpy was turned off
            out = out.detach().float().cpu().numpy()
        return out.reshape(len(texts), -1)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string")
        if self._model is None:
            raise RuntimeError("FlagModelEmbedder is closed")
        if len(texts) == 0:
            # FlagModel's batch-size probe loop cannot handle an empty list.
            return empty_embeddings(self.dim)
        # "" tokenizes to only [CLS][SEP], which embeds fine, but None or non-str would not; a blank text
        # gets one space so every row is a real (and identical) embedding rather than an error.
        clean = [t if isinstance(t, str) and t.strip() else " " for t in texts]
        # FlagModel normalises in the model dtype (fp16 on GPU); re-normalise in float64 so unit length
        # holds to float32 precision for inner-product search.
        return l2_normalize(self._encode(clean))

    def close(self) -> None:
        model, self._model = getattr(self, "_model", None), None
        if model is None:
            return
        try:
            model.stop_self_pool()  # no-op with one device; kept for safety if devices ever widen
        except Exception as exc:  # noqa: BLE001 - the model is dropped either way
            log.warning("stopping the embedder's worker pool failed: %s: %s", type(exc).__name__, exc)
        del model
        gc.collect()
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
