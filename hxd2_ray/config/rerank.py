"""The reranker of retrieved chunks (section ``rerank``, chosen by ``backend``; query time only)."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from hxd2_ray.config.base import FrozenSection

_BACKEND = "none: no reranker; flag: a cross-encoder through FlagEmbedding; overlap: the word-overlap baseline."


class NoRerankerConfig(FrozenSection):
    """No reranker: chunks keep retrieval's order."""

    backend: Literal["none"] = Field("none", description=_BACKEND)


class FlagRerankerConfig(FrozenSection):
    """A local cross-encoder that scores each (question, passage) pair."""

    backend: Literal["flag"] = Field("flag", description=_BACKEND)
    model: str = Field(..., description="Local folder of a cross-encoder (bge-reranker-v2-m3); no hub downloads.")
    model_id: str | None = Field(None, description="Name shown in traces; defaults to the folder name.")
    use_fp16: bool = Field(False, description="Score in float16 (GPU: faster; scores differ in the last digits).")
    batch_size: int = Field(32, gt=0, description="Pairs scored per forward pass of the cross-encoder.")
    max_length: int = Field(512, gt=0, description="Tokens of question + passage per pair.")
    normalize: bool = Field(True, description="Sigmoid of the logit: scores in (0, 1).")
    device: str | None = Field(None, description="None: cuda:0 when there is a GPU, else cpu.")


class OverlapRerankerConfig(FrozenSection):
    """Deterministic, model-free: the share of the question's words found in the passage (tests, baselines)."""

    backend: Literal["overlap"] = Field("overlap", description=_BACKEND)
    model_id: str = Field("word-overlap-v1", description="Name shown in traces.")


RerankConfig = Annotated[
    Union[NoRerankerConfig, FlagRerankerConfig, OverlapRerankerConfig], Field(discriminator="backend")
]
