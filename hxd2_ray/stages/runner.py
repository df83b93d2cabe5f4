"""The seam between the index build's flow and where its stages run.

:class:`~hxd2_ray.indexer.flow.IndexBuild` decides what to do (which chunks to extract, what to merge,
which texts to embed, when a budget stops the run); a :class:`StageRunner` runs those units of work and keeps
the run's shared services (the usage ledger with its budget, the LLM cache, the checks of the files its workers
report). ``hxd2_ray.stages.ray_runner`` runs them on Ray Data; ``hxd2_ray.stages.local_runner`` in this process,
so tests and small corpora take the very same flow without Ray. A runner is made per run by a
:data:`RunnerFactory` from the run's :class:`RunContext`.
"""

from __future__ import annotations

import posixpath
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import pyarrow as pa
import pyarrow.fs as pafs

from hxd2_ray.index_store.output import open_output
from hxd2_ray.llm.cache import CacheLocation
from hxd2_ray.progress import NO_COUNTER, StageCounter

if TYPE_CHECKING:
    from hxd2_ray.config import HxdConfig
LLM_CACHE_FOLDER = "_llm_cache"


@dataclass(frozen=True)
class RunOptions:
    """Per-run choices that are not part of the index: the budget and a dry run."""

    budget_tokens: int | None = None  # LLM tokens (prompt + completion) this run may spend
    budget_usd: float | None = None  # dollars this run may spend (cost.prices)
    dry_run: bool = False  # estimate tokens, time and cost from a sample; build nothing
    sync: bool = False  # an update makes the index exactly the input: documents whose files are gone are deleted
    rebuild: bool = False  # an index this release or config would extract differently is built again, not refused


def _log(msg: str) -> None:
    print(f"[hxd2 index] {msg}", file=sys.stderr, flush=True)


@contextmanager
def _no_stage(name: str, status: Callable[[], str]) -> Iterator[None]:
    yield


def _no_counter(stage: str, *, unit: str = "items", total: int | None = None) -> StageCounter:
    return NO_COUNTER


@dataclass(frozen=True)
class BuildHooks:
    """How a build reports while it runs; the job wires them to its progress board and telemetry.

    ``log``: a line for the log; ``say``: a line the user must see (what a crash left and this run repaired);
    ``stage``: the context of one stage (its status read at its end); ``counter``: a stage's progress counter."""

    log: Callable[[str], None] = _log
    say: Callable[[str], None] = _log
    stage: Callable[[str, Callable[[], str]], AbstractContextManager[None]] = _no_stage
    counter: Callable[..., StageCounter] = _no_counter


@dataclass(frozen=True)
class InputListing:
    files: list[str]  # in the input's form (s3://bucket/key or an absolute path)
    fs: pafs.FileSystem
    paths: list[str]  # in-filesystem paths
    fingerprint: str  # paths, sizes, modification times, and what the walk rejected
    prechecked: list[Any]  # quarantined from the listing alone (too large, unsupported, unreachable)
    readable: list[str]


@dataclass(frozen=True)
class RunContext:
    """What a runner needs to know of its run."""

    cfg: HxdConfig
    options: RunOptions
    fs: pafs.FileSystem  # the output's
    root: str
    staging: str  # <root>/_staging, where stages persist their rows
    output_uri: str
    prompt_version: str
    hooks: BuildHooks = field(default_factory=BuildHooks)


class MergeResult(NamedTuple):
    entities: pa.Table  # MERGED_ENTITIES rows (hxd2_ray.stages.merge_stage)
    relations: pa.Table  # MERGED_RELATIONS rows
    relation_mentions: pa.Table  # the exploded relation mentions (for endpoints never extracted as entities)
    where: str  # for the stage status: "in the driver", "on Ray in N partitions"


class StageRunner(Protocol):
    """Runs a build's units of work and holds the run's services (see the module's doc)."""

    nodes_checked: int
    files_checked: int
    writer_nodes: set[str]  # nodes whose workers wrote the files checked

    def parse(self, listing: InputListing) -> pa.Table:
        """The PARSED rows (hxd2_ray.stages.columns) of ``listing.readable``."""
        ...

    def extract(self, pending: pa.Table) -> pa.Table:
        """Extract and persist ``pending`` chunks under the staging folder; their stats rows (one per batch)."""
        ...

    def merge(self, ok: pa.Table) -> MergeResult:
        """Merge the successful extractions ``ok`` across the corpus."""
        ...

    def summarize(self, long_rows: pa.Table, schema: pa.Schema) -> pa.Table:
        """LLM summaries of merged rows over the description budget; fewer rows back when the budget stopped."""
        ...

    def embed(self, pending: pa.Table) -> pa.Table:
        """Embed and persist ``pending`` (text_key, text) rows under the staging folder; their stats rows."""
        ...

    def totals(self) -> dict[str, Any]: ...

    def exhausted(self) -> str: ...

    def check_reported(self, stats: pa.Table, stage: str) -> None: ...

    def check_nodes(self, staging: str, input_fs: pafs.FileSystem | None, input_paths: list[str]) -> None: ...

    def cache_summary(self) -> dict[str, Any]: ...

    def compact_cache(self) -> int: ...

    def close(self) -> None: ...


RunnerFactory = Callable[[RunContext], StageRunner]


def cache_location(cfg: HxdConfig, fs: pafs.FileSystem, root: str) -> CacheLocation | None:
    """The LLM cache of this run: ``llm_cache.location``, else ``<output>/_llm_cache``; None when disabled."""

    if not cfg.llm_cache.enabled:
        return None
    if cfg.llm_cache.location:
        cache_fs, path = open_output(cfg.llm_cache.location, cfg.s3)
        return CacheLocation(cache_fs, path)
    return CacheLocation(fs, posixpath.join(root, LLM_CACHE_FOLDER))
