"""Sharded Faiss vector families: write once (atomically), open and search. The only module that imports faiss.

A family is split into ``num_shards`` Faiss indexes by ``vector_id % num_shards`` so shards can be built
in parallel (Ray tasks) and, later, served separately. Writing is three composable steps:

1. :func:`plan_family` — ids, normalisation, shard assignment, index kind, and for IVF the single
   training run on a sample spread over the whole family (all shards share those centroids, so their
   scores are comparable and merging is exact over the probed lists).
2. :func:`build_shard` — pure ``(vectors, ids, spec) -> bytes``; safe to run in a Ray task.
3. :func:`commit_family` — write shards, id map and ``family.json`` into a temp dir, then rename.

:func:`write_family` composes them: in-process by default (each shard built and written straight to
disk), or with ``map_fn`` fanning :func:`build_shard` out and committing the returned blobs.

Index kinds: ``flat`` (exact), ``hnsw``, ``ivf`` (IVF-Flat) and ``ivfpq`` (IVF over product-quantized codes, for
tens of millions of vectors: a probe scans ``m`` bytes a vector instead of ``4 * dim``; with ``refine`` the best
``k * refine`` candidates are re-scored against the shard's full vectors, kept beside the codes in the same file
(Faiss ``IndexRefineFlat``), so only the candidates' rows of them are ever read). Shards are opened
memory-mapped (:data:`MMAP_FLAGS`): the codes, lists and graphs stay in the OS page cache, read on demand and
shared by every process on the node that opens the same files; a Faiss build that cannot map a shard reads it
whole and says so in the log.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import faiss
import numpy as np
import pyarrow as pa

from hxd2_ray.config import VectorsConfig
from hxd2_ray.errors import IndexMismatchError, IndexNotFoundError
from hxd2_ray.vectors.base import (
    FAMILY_FORMAT_VERSION,
    FAMILY_JSON,
    FamilyInfo,
    IndexKind,
    SearchHits,
    ShardSpec,
    auto_nlist,
    auto_pq_m,
    check_query_dim,
    family_dir,
    key_ids,
    mapped_array,
    normalized,
    open_id_map,
    pq_min_train,
    shard_file,
    shard_ids_file,
    training_sample,
    write_id_map,
)

__all__ = [
    "FaissFamilyIndex",
    "FamilyPlan",
    "build_shard",
    "commit_family",
    "plan_family",
    "stored_vectors",
    "upgrade_family",
    "train_ivf",
    "train_ivfpq",
    "write_family",
]

log = logging.getLogger(__name__)

# How shards are opened: IO_FLAG_MMAP_IFC maps what a shard holds (flat codes, HNSW links and storage, IVF lists)
# straight from the file instead of copying it (Faiss >= 1.11; checked for all four kinds with 1.15.1), read-only.
_MMAP_IFC: int = getattr(faiss, "IO_FLAG_MMAP_IFC", 0)
MMAP_FLAGS = _MMAP_IFC | faiss.IO_FLAG_READ_ONLY if _MMAP_IFC else 0


# ---------------------------------------------------------------------------------------------------
# Pure builders (bytes in, bytes out) so Ray can ship them.


def _to_bytes(index: faiss.Index) -> bytes:
    return faiss.serialize_index(index).tobytes()


def _from_bytes(blob: bytes) -> faiss.Index:
    return faiss.deserialize_index(np.frombuffer(blob, dtype=np.uint8))


def train_ivf(sample: np.ndarray, dim: int, nlist: int, nprobe: int, seed: int = 0) -> bytes:
    """An empty IVF-Flat (inner product) trained on ``sample`` (already normalised); serialised."""
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = seed  # k-means init is seeded: the same input trains the same centroids
    index.train(np.ascontiguousarray(sample, dtype=np.float32))
    index.nprobe = nprobe
    return _to_bytes(index)


def train_ivfpq(sample: np.ndarray, dim: int, nlist: int, m: int, nbits: int, nprobe: int, seed: int = 0) -> bytes:
    """An empty IVF-PQ (inner product, residuals encoded) trained on ``sample`` (already normalised): the coarse
    centroids and the ``m`` codebooks of ``2**nbits`` centroids; serialised."""
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFPQ(quantizer, dim, nlist, m, nbits, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = seed
    index.pq.cp.seed = seed
    x = np.ascontiguousarray(sample, dtype=np.float32)
    # The coarse centroids first, on every OpenMP thread (what IndexIVF.train would do; it then sees a trained
    # quantizer and goes on to the codebooks)...
    faiss.Clustering(dim, nlist, index.cp).train(x, quantizer)
    quantizer.is_trained = True
    # ...then the codebooks on one: m small k-means that OpenMP's spin-waits only slow down (2 s against 22 s on
    # two cores for 20,000 vectors of dim 384, m=48).
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        index.train(x)
    finally:
        faiss.omp_set_num_threads(threads)
    index.nprobe = nprobe
    return _to_bytes(index)


def _build_index(vectors: np.ndarray, ids: np.ndarray, spec: ShardSpec) -> faiss.Index:
    vecs = np.ascontiguousarray(vectors, dtype=np.float32)
    labels = np.ascontiguousarray(ids, dtype=np.int64)
    if vecs.ndim != 2 or vecs.shape[1] != spec.dim or vecs.shape[0] != labels.shape[0]:
        raise ValueError(f"shard input mismatch: vectors {vecs.shape}, ids {labels.shape}, dim {spec.dim}")
    index: faiss.Index
    # Flat and HNSW shards hold no ids (a label is a position; commit writes each position's id beside the shard,
    # shard_ids_file), so no Faiss id map is built in the memory of every process that reads them.
    if spec.kind == "flat":
        index = faiss.IndexFlatIP(spec.dim)
    elif spec.kind == "hnsw":
        index = faiss.IndexHNSWFlat(spec.dim, int(spec.params["M"]), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(spec.params["ef_construction"])
        index.hnsw.efSearch = int(spec.params["ef_search"])
    elif spec.kind in ("ivf", "ivfpq"):
        if spec.trained is None:
            raise ValueError(f"an {spec.kind} ShardSpec needs the trained empty index (spec.trained)")
        index = _from_bytes(spec.trained)  # IVF stores 64-bit ids itself: no IDMap wrapper needed
        refine = int(spec.params.get("refine", 0))
        if spec.kind == "ivfpq" and refine > 0:
            codes = index
            index = faiss.IndexRefineFlat(codes)  # the full vectors beside the codes, serialised with them
            index.k_factor = refine
            index.own_fields = True  # the refine index frees the codes' index; Python no longer owns it
            codes.this.disown()  # type: ignore[attr-defined]  # SWIG ownership handle
    else:
        raise ValueError(f"unknown index kind {spec.kind!r}; expected flat, hnsw, ivf or ivfpq")
    if len(labels):
        if _positional(spec.kind, spec.params):
            index.add(vecs)
        else:
            index.add_with_ids(vecs, labels)
    return index


# build_shard's arguments for one shard, and a map of build_shard over them (e.g. fanned out as Ray tasks).
ShardArgs = tuple[np.ndarray, np.ndarray, ShardSpec]
ShardMap = Callable[[Callable[..., bytes], Iterable[ShardArgs]], Iterable[bytes]]


def build_shard(vectors: np.ndarray, ids: np.ndarray, spec: ShardSpec) -> bytes:
    """One shard index holding ``vectors`` (normalised float32 [n, dim]) under ``ids`` (int64), serialised."""
    return _to_bytes(_build_index(vectors, ids, spec))


# ---------------------------------------------------------------------------------------------------


@dataclass
class FamilyPlan:
    """Everything needed to build and commit a family; shard inputs are materialised on demand.

    ``vectors`` is the caller's array, uncopied: :meth:`shard_inputs` makes each shard's normalised,
    C-contiguous copy when it is built, so a family that may be gigabytes is never copied whole.
    """

    info: FamilyInfo
    spec: ShardSpec
    keys: list[str]  # caller's order
    ids: np.ndarray  # int64 [n], aligned with keys
    shards: np.ndarray  # int32 [n], shard of each key
    order: np.ndarray  # int64 [n], rows of keys in shard order
    bounds: np.ndarray  # int64 [num_shards + 1]: shard s holds rows order[bounds[s]:bounds[s + 1]]
    vectors: np.ndarray  # float32 [n, dim], caller's order, not normalised

    def shard_inputs(self, shard: int) -> tuple[np.ndarray, np.ndarray]:
        """(normalised float32 vectors, int64 ids) of one shard; fresh copies, safe to ship to a task."""
        rows = self._rows(shard)
        what = f"{self.info.family} vectors"
        return normalized(self.vectors[rows], what=what, copy=False), self.ids[rows]

    def shard_ids(self, shard: int) -> np.ndarray:
        """The ids of one shard's vectors in the order they are added."""
        return self.ids[self._rows(shard)]

    def _rows(self, shard: int) -> np.ndarray:
        return self.order[int(self.bounds[shard]) : int(self.bounds[shard + 1])]


def _resolve_kind(cfg: VectorsConfig, largest_shard: int) -> IndexKind:
    if cfg.index_type == "auto":
        if largest_shard <= cfg.flat_max_vectors:
            return "flat"
        return "ivf" if largest_shard <= cfg.ivf_max_vectors else "ivfpq"
    return cfg.index_type


def _positional(kind: str, params: dict[str, Any]) -> bool:
    """Whether a shard's labels are positions (its vector ids in shard_ids_file) rather than the ids themselves:
    flat and HNSW shards, and IVF-PQ shards with re-scoring (Faiss' IndexRefine labels rows of its full vectors)."""
    return kind in ("flat", "hnsw") or (kind == "ivfpq" and int(params.get("refine", 0)) > 0)


def plan_family(
    family: str,
    keys: Sequence[str],
    vectors: np.ndarray,
    cfg: VectorsConfig,
    seed: int = 0,
    ids: np.ndarray | None = None,
) -> FamilyPlan:
    """Validate, assign shards, choose the index kind and (IVF) train once on an even sample of the family."""
    keys = list(keys)
    n = len(keys)
    vecs = np.asarray(vectors, dtype=np.float32)
    if vecs.ndim != 2:
        if n == 0 and vecs.size == 0:
            raise ValueError(f"family {family!r} is empty: pass vectors of shape [0, dim] so dim is known")
        raise ValueError(f"family {family!r}: vectors must be [n, dim], got shape {vecs.shape}")
    if vecs.shape[0] != n:
        raise ValueError(f"family {family!r}: {n} keys but {vecs.shape[0]} vectors")
    dim = int(vecs.shape[1])
    if dim <= 0:
        raise ValueError(f"family {family!r}: vector dimension must be positive")
    if n and not np.isfinite(np.einsum("ij,ij->i", vecs, vecs)).all():  # fail before any shard is built
        raise ValueError(f"{family} vectors contain NaN or infinite values (or magnitudes beyond float32 range)")
    ids = key_ids(keys, ids)
    num_shards = cfg.num_shards
    shards = (ids % num_shards).astype(np.int32)
    shard_counts = np.bincount(shards, minlength=num_shards)
    order = np.argsort(shards, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(shard_counts)]).astype(np.int64)
    kind = _resolve_kind(cfg, int(shard_counts.max(initial=0)))

    params: dict[str, Any] = {"requested_index_type": cfg.index_type}
    trained = None
    if kind == "hnsw":
        params.update(M=cfg.hnsw_m, ef_construction=cfg.hnsw_ef_construction, ef_search=cfg.hnsw_ef_search)
    elif kind == "ivf" and n:
        nlist = auto_nlist(n, cfg.ivf_nlist, cfg.train_sample_size)
        # Spread over the caller's row order, the whole family end to end (not the first batch).
        sample_rows = training_sample(n, cfg.train_sample_size, seed)
        trained = train_ivf(normalized(vecs[sample_rows], copy=False), dim, nlist, cfg.ivf_nprobe, seed)
        params.update(nlist=nlist, nprobe=cfg.ivf_nprobe, train_size=int(len(sample_rows)), seed=seed)
    elif kind == "ivfpq" and n:
        m, nbits = auto_pq_m(dim, cfg.ivfpq_m), cfg.ivfpq_nbits
        sample_rows = training_sample(n, cfg.train_sample_size, seed)
        if len(sample_rows) < pq_min_train(nbits):  # too few vectors to train the codebooks: exact is cheap here
            kind = "flat"
            params["fallback"] = f"ivfpq needs {pq_min_train(nbits):,} vectors to train (nbits={nbits}); written flat"
        else:
            nlist = auto_nlist(n, cfg.ivf_nlist, cfg.train_sample_size)
            sample = normalized(vecs[sample_rows], copy=False)
            trained = train_ivfpq(sample, dim, nlist, m, nbits, cfg.ivf_nprobe, seed)
            params.update(
                nlist=nlist,
                nprobe=cfg.ivf_nprobe,
                m=m,
                nbits=nbits,
                refine=cfg.ivfpq_refine,
                train_size=int(len(sample_rows)),
                seed=seed,
            )
    info = FamilyInfo(
        family=family,
        dim=dim,
        count=n,
        index_type=kind,
        num_shards=num_shards,
        params=params,
        shard_counts=tuple(int(c) for c in shard_counts) if n else (),
    )
    return FamilyPlan(
        info=info,
        spec=ShardSpec(kind=kind, dim=dim, params=params, trained=trained),
        keys=keys,
        ids=ids,
        shards=shards,
        order=order,
        bounds=bounds,
        vectors=vecs,
    )


def commit_family(root: str | Path, plan: FamilyPlan, shard_blobs: Sequence[bytes | np.ndarray]) -> FamilyInfo:
    """Write shards built elsewhere (:func:`build_shard` results, in shard order) plus metadata, atomically."""
    if plan.info.count and len(shard_blobs) != plan.info.num_shards:
        raise ValueError(f"{len(shard_blobs)} shard blobs for {plan.info.num_shards} shards")

    def write_blobs(folder: Path) -> None:
        for s, blob in enumerate(shard_blobs):
            with open(folder / shard_file(s), "wb") as fh:
                fh.write(blob if isinstance(blob, bytes) else blob.data)  # .data: the array's buffer, no copy

    return _commit(root, plan, write_blobs)


def _commit(root: str | Path, plan: FamilyPlan, write_shards: Callable[[Path], None]) -> FamilyInfo:
    """Write the family into a temp dir beside its final place, then swap it in: readers see all or nothing."""
    info = plan.info
    final = family_dir(root, info.family)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{info.family}.tmp-{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        if info.count:  # an empty family has no shard files; search answers nothing
            write_shards(tmp)
            if _positional(plan.spec.kind, plan.spec.params):
                for s in range(info.num_shards):
                    np.save(tmp / shard_ids_file(s), np.ascontiguousarray(plan.shard_ids(s), dtype=np.int64))
        by_id = np.argsort(plan.ids, kind="stable")  # sorted ids: a search maps ids to keys by binary search
        write_id_map(tmp, plan.ids[by_id], pa.array(plan.keys, pa.large_string()).take(pa.array(by_id)))
        (tmp / FAMILY_JSON).write_text(json.dumps(info.to_dict(), indent=2, sort_keys=True), encoding="utf-8")
        _swap_in(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info


def _swap_in(tmp: Path, final: Path) -> None:
    if final.exists():
        old = final.parent / f".{final.name}.old-{uuid.uuid4().hex}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)


def write_family(
    root: str | Path,
    family: str,
    keys: Sequence[str],
    vectors: np.ndarray,
    cfg: VectorsConfig,
    seed: int = 0,
    map_fn: ShardMap | None = None,
    ids: np.ndarray | None = None,
) -> FamilyInfo:
    """Plan, build every shard and commit; returns what family.json records.

    ``ids``: precomputed ``vector_id`` of each key (e.g. the EMBEDDINGS.vector_id column), to skip hashing.
    ``map_fn(build_shard, [(vectors, ids, spec), ...])`` may fan the shard builds out (e.g. Ray tasks)
    and must return the blobs in shard order. Without it shards are built here and written straight to
    disk (no serialised copy).
    """
    plan = plan_family(family, keys, vectors, cfg, seed, ids)
    n_shards = plan.info.num_shards
    if map_fn is not None and plan.info.count:
        jobs = ((*plan.shard_inputs(s), plan.spec) for s in range(n_shards))
        return commit_family(root, plan, list(map_fn(build_shard, jobs)))

    def build_and_write(folder: Path, shard: int) -> None:
        index = _build_index(*plan.shard_inputs(shard), plan.spec)
        faiss.write_index(index, str(folder / shard_file(shard)))

    def write_shards(folder: Path) -> None:
        # Flat shards are pure memory copies (copy, normalise, add, write: all release the GIL), so
        # threads overlap them ~2x. HNSW/IVF adds are OpenMP-parallel already; nesting threads over
        # them oversubscribes the cores and OpenMP spin-waits collapse throughput, so those go one by one.
        workers = min(n_shards, os.cpu_count() or 1) if plan.spec.kind == "flat" else 1
        if workers <= 1:
            for s in range(n_shards):
                build_and_write(folder, s)
            return
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda s: build_and_write(folder, s), range(n_shards)))

    return _commit(root, plan, write_shards)


# ---------------------------------------------------------------------------------------------------


def _apply_search_params(index: faiss.Index, info: FamilyInfo) -> None:
    """Search knobs come from family.json, not whatever the serialised index happened to hold."""
    if info.index_type in ("ivf", "ivfpq"):
        faiss.extract_index_ivf(index).nprobe = int(info.params["nprobe"])
        if _positional(info.index_type, info.params):
            if not isinstance(index, faiss.IndexRefine):
                raise IndexMismatchError(
                    f"family {info.family!r} is ivfpq with refine but a shard holds {type(index).__name__}"
                )
            index.k_factor = float(info.params["refine"])
    elif info.index_type == "hnsw":
        inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap2) else index
        if not isinstance(inner, faiss.IndexHNSW):
            raise IndexMismatchError(f"family {info.family!r} is hnsw but a shard holds {type(inner).__name__}")
        inner.hnsw.efSearch = int(info.params["ef_search"])


def _read_shard(path: Path, mmap: bool) -> faiss.Index:
    if mmap and MMAP_FLAGS:
        try:
            return faiss.read_index(str(path), MMAP_FLAGS)
        except RuntimeError as exc:
            log.warning("faiss shard %s cannot be memory-mapped (%s): read into memory", path, str(exc)[:200])
    elif mmap:
        log.warning(
            "faiss %s cannot memory-map indexes (no IO_FLAG_MMAP_IFC): %s read into memory", faiss.__version__, path
        )
    return faiss.read_index(str(path))


def stored_vectors(root: str | Path, family: str) -> Iterator[tuple[str, np.ndarray]]:
    """(key, normalised vector) of every vector of a flat or HNSW family, either format, read back from its shards
    (for comparisons by content and maintenance checks; not a query path)."""
    folder = family_dir(root, family)
    info = FamilyInfo.from_dict(json.loads((folder / FAMILY_JSON).read_text(encoding="utf-8")))
    ids, keys = open_id_map(folder, info.format_version)
    for s in range(info.num_shards if info.count else 0):
        shard = faiss.read_index(str(folder / shard_file(s)))
        if isinstance(shard, faiss.IndexIDMap2):  # format 1 (``shard`` owns ``inner``: kept alive beside it)
            shard_ids, inner = faiss.vector_to_array(shard.id_map), faiss.downcast_index(shard.index)
        else:
            shard_ids, inner = np.load(folder / shard_ids_file(s)), shard
        rows = np.searchsorted(ids, shard_ids)
        yield from zip(keys.take(pa.array(rows)).to_pylist(), inner.reconstruct_n(0, inner.ntotal))


def upgrade_family(root: str | Path, family: str) -> bool:
    """Rewrite a family of format 1 in format 2, in place (a temp folder beside it, swapped in): its id map as
    ``ids.npy`` + ``keys.arrow``, its flat or HNSW shards without their ``IndexIDMap2`` and with their positions'
    ids beside them (the same vectors in the same order: it answers the same). False when it is already format 2."""
    folder = family_dir(root, family)
    info = FamilyInfo.from_dict(json.loads((folder / FAMILY_JSON).read_text(encoding="utf-8")))
    if info.format_version >= 2:
        return False
    ids, keys = open_id_map(folder, info.format_version)
    tmp = folder.parent / f".{family}.tmp-{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        for s in range(info.num_shards if info.count else 0):
            shard = faiss.read_index(str(folder / shard_file(s)))
            if isinstance(shard, faiss.IndexIDMap2):
                inner = faiss.downcast_index(shard.index)  # owned by ``shard``, which stays alive meanwhile
                faiss.write_index(inner, str(tmp / shard_file(s)))
                np.save(tmp / shard_ids_file(s), faiss.vector_to_array(shard.id_map).astype(np.int64))
            else:  # IVF: its lists hold the ids
                shutil.copyfile(folder / shard_file(s), tmp / shard_file(s))
        write_id_map(tmp, ids, keys)
        upgraded = {**info.to_dict(), "format_version": FAMILY_FORMAT_VERSION}
        (tmp / FAMILY_JSON).write_text(json.dumps(upgraded, indent=2, sort_keys=True), encoding="utf-8")
        _swap_in(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


class FaissFamilyIndex:
    """All shards of one family, memory-mapped by default; search fans out over the shards and merges (max inner
    product)."""

    def __init__(
        self,
        info: FamilyInfo,
        shards: list[faiss.Index],
        ids: np.ndarray,
        keys: pa.Array,
        shard_ids: Sequence[np.ndarray | None] = (),
    ):
        self.info = info
        self.family = info.family
        self.dim = info.dim
        self.count = info.count
        self._shards = shards
        self._ids = ids  # int64, ascending; memory-mapped (format 2)
        self._keys = keys  # the key of each id, an Arrow array; memory-mapped (format 2)
        # per shard, the vector id at each position when its labels are positions (format 2 flat and HNSW); mapped
        self._shard_ids = list(shard_ids) or [None] * len(shards)

    @classmethod
    def open(cls, root: str | Path, family: str, *, mmap: bool = True) -> "FaissFamilyIndex":
        """The family's shards, memory-mapped (``mmap``, the default: shared with every process on the node that
        maps the same files; a shard Faiss cannot map is read whole, with a log line) or read into memory. The id
        map is memory-mapped either way (a family of format 1, written before, reads its ``idmap.parquet``)."""
        folder = family_dir(root, family)
        meta = folder / FAMILY_JSON
        if not meta.exists():
            raise IndexNotFoundError(f"no vector family {family!r} at {folder}: the index is missing or incomplete")
        info = FamilyInfo.from_dict(json.loads(meta.read_text(encoding="utf-8")))
        if info.format_version > FAMILY_FORMAT_VERSION:
            raise IndexMismatchError(
                f"vector family {family!r} has format {info.format_version}; this version reads up to "
                f"{FAMILY_FORMAT_VERSION}"
            )
        ids, keys = open_id_map(folder, info.format_version)
        shards: list[faiss.Index] = []
        positional = info.format_version >= 2 and _positional(info.index_type, info.params)
        shard_ids: list[np.ndarray | None] = []
        if info.count:
            for s in range(info.num_shards):
                index = _read_shard(folder / shard_file(s), mmap)
                _apply_search_params(index, info)
                shards.append(index)
                at = mapped_array(folder / shard_ids_file(s)) if positional else None
                if at is not None and len(at) != index.ntotal:
                    raise IndexMismatchError(
                        f"vector family {family!r}: shard {s} holds {index.ntotal} vectors but {shard_ids_file(s)} "
                        f"names {len(at)}"
                    )
                shard_ids.append(at)
        total = sum(int(ix.ntotal) for ix in shards)
        if total != info.count or len(ids) != info.count:
            raise IndexMismatchError(
                f"vector family {family!r} is inconsistent: family.json says {info.count} vectors, "
                f"shards hold {total}, id map has {len(ids)}"
            )
        return cls(info, shards, ids, keys, shard_ids)

    def search(self, queries: np.ndarray, k: int) -> SearchHits:
        q = np.asarray(queries, dtype=np.float32)
        if q.ndim == 1:
            q = q.reshape(1, -1)
        check_query_dim(q, self.dim, self.family)
        nq = q.shape[0]
        k = min(int(k), self.count)
        if k <= 0 or nq == 0:
            return [[] for _ in range(nq)]
        q = normalized(q, self.dim, "queries")
        results = [self._search_shard(ix, at, q, k) for ix, at in zip(self._shards, self._shard_ids)]
        if len(results) == 1:
            scores, ids = results[0]
        else:
            scores, ids = faiss.merge_knn_results(
                np.stack([r[0] for r in results]), np.stack([r[1] for r in results]), keep_max=True
            )
        # Missing results come back as id -1; an id absent from the id map would be a corrupt family,
        # so both are dropped rather than mapped to a neighbouring key.
        pos = np.minimum(np.searchsorted(self._ids, ids), len(self._ids) - 1)
        valid = (ids >= 0) & (self._ids[pos] == ids)
        # The hits' keys in one take from the (mapped) key column: only their pages are read.
        keys = iter(self._keys.take(pa.array(pos[valid], pa.int64())).to_pylist())
        out: SearchHits = []
        for row_ok, row_d in zip(valid, scores):
            out.append([(next(keys), float(d)) for ok, d in zip(row_ok, row_d) if ok])
        return out

    @staticmethod
    def _search_shard(
        index: faiss.Index, ids_at: np.ndarray | None, q: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        scores, labels = index.search(q, k)
        if ids_at is None or not len(ids_at):  # labels are the vector ids (IVF; format 1), or none was found
            return scores, labels
        found = labels >= 0
        return scores, np.where(found, ids_at[np.where(found, labels, 0)], -1)  # positions -> ids

    def close(self) -> None:
        self._shards = []  # the last reference to a mapped shard unmaps it
        self._shard_ids = []

    def __enter__(self) -> "FaissFamilyIndex":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
