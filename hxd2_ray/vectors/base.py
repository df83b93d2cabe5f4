"""Vector index protocol, on-disk layout and the NumPy helpers shared by the Faiss and exact indexes.

Layout of one family under an index root::

    <root>/vectors/<family>/family.json        dim, count, index_type, metric, num_shards, params, format_version
    <root>/vectors/<family>/ids.npy            the vector ids (int64), ascending
    <root>/vectors/<family>/keys.arrow         the key of each id, in the same order (Arrow IPC, one record batch)
    <root>/vectors/<family>/shard-0000.faiss   one Faiss index per shard (none when count == 0)
    <root>/vectors/<family>/shard-0000.ids.npy a flat or HNSW shard's vector id at each position (int64)

The id map (``ids.npy`` and ``keys.arrow``, format 2) is memory-mapped when a family opens: a search finds its
hits' ids by binary search in the mapped ids and takes their keys from the mapped column, so opening reads neither
whole and every process on a node shares their pages. A family of format 1 (written before) has ``idmap.parquet``
instead (vector_id, key, shard, sorted by id), read whole when it opens, and its flat and HNSW shards are Faiss
``IndexIDMap2`` (a hash map built in memory when read); a vector id's shard is ``id % num_shards``.

Nothing here imports faiss, so the query side and tests can use the types without it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, Sequence

import numpy as np
import pyarrow as pa

from hxd2_ray.errors import IndexMismatchError
from hxd2_ray.types import vector_id

# 2: the id map as ids.npy + keys.arrow, and flat and HNSW shards without a Faiss id map (their positions' ids in
# shard-NNNN.ids.npy), all mapped; 1: idmap.parquet, read whole, and flat and HNSW shards in a Faiss IndexIDMap2.
FAMILY_FORMAT_VERSION = 2
METRIC = "ip"  # inner product of L2-normalised vectors, i.e. cosine similarity
FAMILY_JSON = "family.json"
IDS_NPY = "ids.npy"
KEYS_ARROW = "keys.arrow"
IDMAP_PARQUET = "idmap.parquet"  # format 1's id map

IndexKind = Literal["flat", "hnsw", "ivf", "ivfpq"]
SearchHits = list[list[tuple[str, float]]]  # per query: (key, cosine score), best first


def family_dir(root: str | Path, family: str) -> Path:
    return Path(root) / "vectors" / family


def shard_file(shard: int) -> str:
    return f"shard-{shard:04d}.faiss"


def shard_ids_file(shard: int) -> str:
    """A flat or HNSW shard's vector ids by position (format 2): Faiss' own id maps are private memory in every
    process (IndexIDMap2 builds a hash map of ~40 bytes a vector when it is read)."""
    return f"shard-{shard:04d}.ids.npy"


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


def write_id_map(folder: Path, ids: np.ndarray, keys: pa.Array) -> None:
    """The id map of format 2 into ``folder``: ``ids`` (int64, ascending) and ``keys`` (the key of each id)."""
    np.save(folder / IDS_NPY, np.ascontiguousarray(ids, dtype=np.int64))
    table = pa.table({"key": keys.cast(pa.large_string())})  # large: one batch may hold past 2 GB of keys
    with pa.OSFile(str(folder / KEYS_ARROW), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
        # One record batch: the mapped column is one contiguous array, a take costs what it returns.
        for batch in table.combine_chunks().to_batches(max_chunksize=max(table.num_rows, 1)):
            out.write_batch(batch)


def open_id_map(folder: Path, format_version: int) -> tuple[np.ndarray, pa.Array]:
    """(ids ascending, the key of each) of the family in ``folder``: memory-mapped for format 2 (nothing is read
    until a search touches it); read whole from ``idmap.parquet`` for format 1."""
    if format_version < 2:
        import pyarrow.parquet as pq  # noqa: PLC0415 - families written before format 2 only

        table = pq.read_table(folder / IDMAP_PARQUET, columns=["vector_id", "key"])
        return table["vector_id"].to_numpy(), _one_array(table["key"])
    ids = mapped_array(folder / IDS_NPY)
    keys = pa.ipc.open_file(pa.memory_map(str(folder / KEYS_ARROW), "r")).read_all()  # zero-copy: the mapping
    return ids, _one_array(keys["key"])


def id_map_files(format_version: int) -> tuple[str, ...]:
    """The files of a family's id map in its format."""
    return (IDMAP_PARQUET,) if format_version < 2 else (IDS_NPY, KEYS_ARROW)


def family_keys(root: str | Path, family: str) -> pa.Array:
    """Every key of a written family (ascending by vector id), without opening its shards."""
    folder = family_dir(root, family)
    info = json.loads((folder / FAMILY_JSON).read_text(encoding="utf-8"))
    return open_id_map(folder, int(info.get("format_version", 1)))[1]


def mapped_array(path: Path) -> np.ndarray:
    """A ``.npy`` file memory-mapped read-only, as a plain ndarray view (np.memmap's own __getitem__ is slow)."""
    try:
        return np.load(path, mmap_mode="r").view(np.ndarray)
    except ValueError:  # numpy cannot map an array of no elements
        return np.load(path)


def _one_array(column: pa.ChunkedArray) -> pa.Array:
    if column.num_chunks == 1:
        return column.chunk(0)
    return column.combine_chunks() if column.num_chunks else pa.array([], column.type)


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
    """IVF-PQ sub-quantizers: ``requested`` (it must divide ``dim``), or one per 2 dimensions (the largest divisor
    of ``dim`` at most dim/2; 192 at dim 384, 32 at dim 64): at dim 64 and 10M vectors, m=8 and m=16 kept recall@10
    0.32 and 0.68 even with 4x re-scoring, m=32 0.998 (docs/benchmarks/vector-scale.md)."""
    if requested is not None:
        if dim % requested:
            divisors = [d for d in range(1, dim + 1) if dim % d == 0 and d <= 256]
            raise ValueError(
                f"vectors.ivfpq_m={requested} does not divide the dimension {dim}; divisors: "
                f"{', '.join(map(str, divisors))}"
            )
        return requested
    return max(d for d in range(1, max(1, dim // 2) + 1) if dim % d == 0)


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
