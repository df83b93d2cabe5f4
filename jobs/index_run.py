"""What one run of the index job shares across its stages on Ray: the usage ledger (a Ray actor: tokens, cost and
the budget), the LLM response cache's location, the checks of the files actors report, and the per-node storage
check before the first stage.
"""

from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from hxd2_ray.config import HxdConfig, llm_model_id
from hxd2_ray.indexing.cluster_storage import ReadCheck, ReportedFile, check_reported_files
from hxd2_ray.indexing.cost import UsageLedger
from hxd2_ray.llm.cache import CacheLocation, ResponseStore
from hxd2_ray.stages.stage_run import RemoteLedger, StageRun

LLM_CACHE_FOLDER = "_llm_cache"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOptions:
    """Per-run choices that are not part of the index: the budget and a dry run."""

    budget_tokens: int | None = None  # LLM tokens (prompt + completion) this run may spend
    budget_usd: float | None = None  # dollars this run may spend (cost.prices)
    dry_run: bool = False  # estimate tokens, time and cost from a sample; build nothing


def cache_location(cfg: HxdConfig, fs: pafs.FileSystem, root: str) -> CacheLocation | None:
    """The LLM cache of this run: ``llm_cache.location``, else ``<output>/_llm_cache``; None when disabled."""
    if not cfg.llm_cache.enabled:
        return None
    if cfg.llm_cache.location:
        from hxd2_ray.ingest.sources import open_output_filesystem

        cache_fs, path = open_output_filesystem(cfg.llm_cache.location, cfg.s3)
        return CacheLocation(cache_fs, path)
    return CacheLocation(fs, posixpath.join(root, LLM_CACHE_FOLDER))


class RunServices:
    """The ledger actor and the :class:`StageRun` every stage actor gets; started once Ray is up."""

    def __init__(
        self, cfg: HxdConfig, options: RunOptions, fs: pafs.FileSystem, root: str, output_uri: str, prompt_version: str
    ) -> None:
        import ray

        self.cfg = cfg
        self.fs = fs
        self.output_uri = output_uri
        self.cache = cache_location(cfg, fs, root)
        ledger_cls = ray.remote(num_cpus=0)(UsageLedger)
        self.ledger = ledger_cls.remote(cfg.cost, options.budget_tokens, options.budget_usd)
        self.stage_run = StageRun(cache=self.cache, prompt_version=prompt_version, ledger=RemoteLedger(self.ledger))
        self.nodes_checked = 0
        self.files_checked = 0
        self.writer_nodes: set[str] = set()  # nodes whose actors wrote the files checked

    def close(self) -> None:
        """End the ledger actor (its totals are read by then): a driver running many jobs keeps no idle ones."""
        import ray

        try:
            ray.kill(self.ledger, no_restart=True)
        except Exception as exc:  # noqa: BLE001 - the run's result matters more than an actor's clean exit
            log.debug("ending the ledger actor failed: %s", exc)

    def totals(self) -> dict[str, Any]:
        import ray

        totals: dict[str, Any] = ray.get(self.ledger.totals.remote())
        return totals

    def exhausted(self) -> str:
        import ray

        return str(ray.get(self.ledger.exhausted.remote()))

    def check_reported(self, stats: pa.Table, stage: str) -> None:
        """Every file the stage's actors reported must be readable here with the rows they reported."""
        if not stats.num_rows or "path" not in stats.column_names:
            return
        reported = [
            ReportedFile(p, int(r), n)
            for p, r, n in zip(
                stats.column("path").to_pylist(),
                stats.column("rows").to_pylist(),
                stats.column("node").to_pylist(),
                strict=True,
            )
            if p
        ]
        self.files_checked += check_reported_files(self.fs, reported, stage, self.output_uri)
        self.writer_nodes.update(r.node for r in reported if r.node)

    def check_nodes(self, staging: str, input_fs: pafs.FileSystem | None, input_paths: list[str]) -> None:
        """Refuse early when a node of the cluster does not share the output (or cannot read the inputs)."""
        if not self.cfg.ray.check_nodes:
            return
        from jobs.cluster_check import check_every_node

        reads = [ReadCheck(input_fs, tuple(input_paths), "input")] if input_fs is not None and input_paths else []
        self.nodes_checked = check_every_node(self.fs, staging, self.output_uri, reads=reads, what="output and input")

    def cache_summary(self) -> dict[str, Any]:
        if self.cache is None:
            return {"enabled": False}
        return {"enabled": True, "location": self.cache.folder}

    def compact_cache(self) -> int:
        """Fold the cache's many small parts (one per actor batch) once a run is over."""
        if self.cache is None:
            return 0
        return ResponseStore(self.cache, llm_model_id(self.cfg.llm)).compact()
