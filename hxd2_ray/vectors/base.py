"""Vector index protocol, on-disk layout and the NumPy helpers shared by the Faiss and exact indexes.

Layout of one family under an index root::

    <root>/vectors/<family>/family.json        dim, count, index_type, metric, num_shards, params
    <root>/vectors/<family>/idmap.parquet      vector_id int64, key string, shard int32 (sorted by id)
    <root>/vectors/<family>/shard-0000.faiss   one Faiss index per shard (none when count == 0)

Nothing here imports faiss, so the query side and tests can use the types without it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, Sequence

import numpy as np

from hxd2_ray.errors import IndexMismatchError
from hxd2_ray.types import vector_id

FAMILY_FORMAT_VERSION = 1
METRIC = "ip"  # inner product of L2-normalised vectors, i.e. cosine similarity
FAMILY_JSON = "family.json"
IDMAP_PARQUET = "idmap.parquet"

IndexKind = Literal["flat", "hnsw", "ivf", "ivfpq"]
SearchHits = list[list[tuple[str, float]]]  # per query: (key, cosine score), best first


def family_dir(root: str | Path, family: str) -> Path:
    return Path(root) / "vectors" / family


def shard_file(shard: int) -> str:
    return f"shard-{shard:04d}.faiss"


@dataclass(frozen=True)
class FamilyInfo:
    """What ``family.json`` records; also copied into the index manifest."""

    family: str
    dim: int
    count: int
    index_type: str  # resolved kind: flat | hnsw | ivf | ivfpq (never "auto")
    num_shards: int
    metric: str = METRIC
    params: dict[str, Any] = field(default_factory=dict)  # nlist/nprobe, M/efSearch…
    shard_counts: tuple[int, ...] = ()
    format_version: int = FAMILY_FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shard_counts"] = list(self.shard_counts)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FamilyInfo":
        d = dict(d)
        d["shard_counts"] = tuple(d.get("shard_counts", ()))
        return cls(**d)


@dataclass(frozen=True)
class ShardSpec:
    """Everything :func:`faiss_index.build_shard` needs; picklable, so a Ray task can build a shard.

    ``trained`` is the serialised empty, trained IVF index (trained once per family); None otherwise.
    """

    kind: IndexKind
    dim: int
    params: dict[str, Any] = field(default_factory=dict)
    trained: bytes | None = None


class VectorIndex(Protocol):
    dim: int
    count: int

    def search(self, queries: np.ndarray, k: int) -> SearchHits:
        """Top-k (key, cosine) per query row, best first; fewer when the index holds fewer."""
        ...

    def close(self) -> None:
        """Let go of what the index holds; the index is not searched afterwards."""
        ...


def normalized(vectors: np.ndarray, dim: int | None = None, what: str = "vectors", *, copy: bool = True) -> np.ndarray:
    """L2-normalised float32, C-contiguous rows (Faiss needs exactly this); a copy unless ``copy=False``
    and the input already is a float32 C-contiguous 2-d array, which is then normalised in place.

    Zero rows stay zero (score 0 against everything); non-finite values are refused because they
    silently poison inner products.
    """
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2:
        raise ValueError(f"{what} must be a 2-d array [n, dim], got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim and arr.shape[0] > 0:
        raise IndexMismatchError(f"{what} have dimension {arr.shape[1]} but the index has dimension {dim}")
    if copy or not arr.flags.c_contiguous or arr is not vectors:
        arr = np.array(arr, dtype=np.float32, order="C", copy=True)
    if arr.size == 0:
        return arr
    sq = np.einsum("ij,ij->i", arr, arr)  # one pass; any NaN/inf in a row makes its sum non-finite
    if not np.isfinite(sq).all():
        raise ValueError(f"{what} contain NaN or infinite values (or magnitudes beyond float32 range)")
    norms = np.sqrt(sq)[:, None]
    np.divide(arr, norms, out=arr, where=norms > 0)
    return arr


def key_ids(keys: Sequence[str], ids: np.ndarray | None = None) -> np.ndarray:
    """int63 ids of the keys (``types.vector_id``); refuses duplicate keys and hash collisions.

    ``ids`` may carry ids computed upstream (the EMBEDDINGS.vector_id column) to skip re-hashing; they
    are spot-checked against the keys and checked for uniqueness like computed ones.
    """
    if ids is None:
        ids = np.fromiter((vector_id(k) for k in keys), dtype=np.int64, count=len(keys))
    else:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.shape != (len(keys),):
            raise ValueError(f"{len(keys)} keys but ids of shape {ids.shape}")
        for i in np.unique(np.linspace(0, len(keys) - 1, num=min(len(keys), 64)).astype(np.int64)):
            if ids[i] != vector_id(keys[i]):
                raise ValueError(f"ids[{i}] = {ids[i]} is not vector_id({keys[i]!r}) = {vector_id(keys[i])}")
    if len(ids) > 1:
        uniq, counts = np.unique(ids, return_counts=True)
        if len(uniq) < len(ids):
            dup_ids = set(uniq[counts > 1].tolist())
            seen: dict[int, str] = {}
            for key, vid in zip(keys, ids.tolist()):
                if vid not in dup_ids:
                    continue
                if vid in seen:
                    other = seen[vid]
                    if other == key:
                        raise ValueError(f"duplicate key {key!r} in a vector family (keys must be unique)")
                    raise ValueError(f"vector id collision: {other!r} and {key!r} both hash to {vid}")
                seen[vid] = key
    return ids


def auto_nlist(n: int, requested: int | None, sample_size: int) -> int:
    """IVF list count: about 4*sqrt(n), capped so every list trains on 39+ sample points (Faiss' minimum)."""
    train_points = min(n, sample_size)
    cap = max(1, train_points // 39)
    want = requested if requested is not None else int(4 * math.sqrt(n))
    return max(1, min(want, cap))


def auto_pq_m(dim: int, requested: int | None) -> int:
    """IVF-PQ sub-quantizers: ``requested`` (it must divide ``dim``), or about one per 8 dimensions (the largest
    divisor of ``dim`` at most dim/8; 48 at dim 384, 8 at dim 64)."""
    if requested is not None:
        if dim % requested:
            divisors = [d for d in range(1, dim + 1) if dim % d == 0 and d <= 256]
            raise ValueError(
                f"vectors.ivfpq_m={requested} does not divide the dimension {dim}; divisors: "
                f"{', '.join(map(str, divisors))}"
            )
        return requested
    return max(d for d in range(1, max(1, dim // 8) + 1) if dim % d == 0)


def pq_min_train(nbits: int) -> int:
    """Vectors a product quantizer of ``nbits`` needs to train its centroids (Faiss' floor: 39 per centroid)."""
    return 39 * (1 << nbits)


def training_sample(n: int, size: int, seed: int) -> np.ndarray:
    """Row indices spread evenly over [0, n): one random pick per equal stratum, so a family sorted by
    source or topic is sampled from end to end (the first batch alone would bias the centroids)."""
    if size >= n:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    edges = np.linspace(0, n, size + 1)
    lo = np.floor(edges[:-1]).astype(np.int64)
    hi = np.maximum(np.floor(edges[1:]).astype(np.int64), lo + 1)
    return np.minimum(lo + (rng.random(size) * (hi - lo)).astype(np.int64), n - 1)


def check_query_dim(queries: np.ndarray, dim: int, family: str) -> None:
    shape = np.shape(queries)
    got = shape[-1] if shape else None
    if got != dim:
        raise IndexMismatchError(
            f"query vectors have dimension {got} but vector family {family!r} has dimension {dim}: "
            "the query embedding model differs from the one the index was built with"
        )
