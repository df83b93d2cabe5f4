"""The index build's stages on Ray Data (:class:`RayRunner`), and starting or joining Ray for a job
(:func:`init_ray`).

The stage classes are the ones :class:`~hxd2_ray.stages.local_runner.InProcessRunner` calls in this process;
here they run in actor pools sized by ``ray.*``, and the run's usage ledger is a Ray actor every stage actor
charges (so one budget holds across the cluster).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import ray
import ray.data

from hxd2_ray.config import HxdConfig
from hxd2_ray.index_store import tables
from hxd2_ray.index_store.cluster_storage import ReadCheck
from hxd2_ray.ingest.sources import resolve_filesystem
from hxd2_ray.progress import StageCounter
from hxd2_ray.stages.actor_capacity import ActorNeeds, watch_capacity
from hxd2_ray.stages.cost import UsageLedger
from hxd2_ray.stages.embed_stage import EmbedAndPersist
from hxd2_ray.stages.extract_stage import ExtractAndPersist
from hxd2_ray.stages.faults import worker_env
from hxd2_ray.stages.ingest_stage import ParseAndChunk
from hxd2_ray.stages.local_runner import (
    PARSE_BATCH_FILES,
    RunnerBase,
    blocks,
    merge_in_process,
    scheme_of,
    with_scheme,
)
from hxd2_ray.stages.merge_stage import (
    MERGED_ENTITIES,
    MERGED_RELATIONS,
    ExplodeEntityMentions,
    ExplodeRelationMentions,
    MergeEntityGroups,
    MergeRelationGroups,
    SummarizeLongDescriptions,
)
from hxd2_ray.stages.runner import InputListing, MergeResult, RunContext
from hxd2_ray.stages.stage_run import RemoteLedger

log = logging.getLogger(__name__)

# check_every_node(fs, folder, location, reads=..., what=...) -> nodes checked (jobs/cluster_check.py)
NodeCheck = Callable[..., int]


def init_ray(cfg: HxdConfig) -> None:
    if not ray.is_initialized():
        _start_ray(cfg)
    # Datasets made from here on take this driver's context.
    ray.data.DataContext.get_current().execution_no_progress_timeout_s = cfg.ray.stall_timeout_s or -1


def _start_ray(cfg: HxdConfig) -> None:
    env_vars = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # Engine logs belong on stderr: stdout carries the --json summary.
        "VLLM_LOGGING_STREAM": "ext://sys.stderr",
    }
    for name in (
        "HXD2_MODELS_DIR",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ENDPOINT_URL",
        "AWS_DEFAULT_REGION",
        "VLLM_CPU_KVCACHE_SPACE",
    ):
        if os.environ.get(name):
            env_vars[name] = os.environ[name]
    env_vars.update(worker_env())  # crash tests: the armed fault points reach the workers
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, runtime_env={"env_vars": env_vars}, log_to_driver=True)
        return
    # "local": a new Ray of this process, even when a `ray start` cluster runs on this machine (joining one is
    # explicit: ray.address or RAY_ADDRESS).
    kwargs: dict[str, Any] = {"address": "local", "include_dashboard": False, "runtime_env": {"env_vars": env_vars}}
    if cfg.ray.num_cpus is not None:
        kwargs["num_cpus"] = cfg.ray.num_cpus
    if cfg.ray.object_store_mb is not None:
        kwargs["object_store_memory"] = cfg.ray.object_store_mb * 1024 * 1024
    ray.init(**kwargs)


def collect(ds: Any) -> pa.Table:
    """The rows of a Ray dataset in the driver (an empty table when it has none)."""
    blocks = [b for b in ray.get(ds.to_arrow_refs()) if b.num_rows]
    if not blocks:
        return pa.table({})
    return pa.concat_tables(blocks, promote_options="permissive")


def _parse_with(batch: pa.Table, cfg: HxdConfig, scheme: str, counter: StageCounter | None = None) -> pa.Table:
    parsed = ParseAndChunk(cfg)(with_scheme(batch, scheme))
    if counter is not None:
        counter.add(done=batch.num_rows)
    return parsed


def _one_actor() -> dict[str, Any]:
    return {"batch_format": "pyarrow", "compute": ray.data.ActorPoolStrategy(size=1)}


class RayRunner(RunnerBase):
    """Every stage on Ray Data; Ray must be up (:func:`init_ray`). ``check_nodes``: the job's check that every
    node shares the output and reads the inputs (off when ``ray.check_nodes`` is false)."""

    def __init__(self, run: RunContext, check_nodes: NodeCheck | None = None) -> None:
        ledger_cls = ray.remote(num_cpus=0)(UsageLedger)
        self.ledger = ledger_cls.remote(run.cfg.cost, run.options.budget_tokens, run.options.budget_usd)
        super().__init__(run, RemoteLedger(self.ledger))
        self._node_check = check_nodes

    def _actor_pool(self, size: int, cpus: float, gpus: float) -> dict[str, Any]:
        return {
            "compute": ray.data.ActorPoolStrategy(size=size),
            "num_cpus": cpus,
            "num_gpus": gpus,
            "resources": self.cfg.ray.stage_resources or None,
        }

    def _watched(self, stage: str, cpus: float, gpus: float) -> AbstractContextManager[None]:
        """The stage's datasets fail once no alive node can host its actors for ``ray.resource_wait_s`` (a lost
        node that offered ``ray.stage_resources``), instead of waiting for one for ever."""
        needs = {"CPU": cpus, "GPU": gpus, **self.cfg.ray.stage_resources}
        return watch_capacity(ActorNeeds(stage, needs, self.cfg.ray.resource_wait_s))

    def parse(self, listing: InputListing) -> pa.Table:
        ds = ray.data.read_binary_files(
            [resolve_filesystem(u, self.cfg.s3)[1] for u in listing.readable], include_paths=True, filesystem=listing.fs
        )
        # Ray hands back in-filesystem paths; documents keep the URI the user gave (s3://bucket/key).
        fn_kwargs = {
            "cfg": self.cfg,
            "scheme": scheme_of(listing.fs),
            "counter": self.hooks.counter("ingest", unit="files", total=len(listing.readable)),
        }
        return collect(
            ds.map_batches(_parse_with, fn_kwargs=fn_kwargs, batch_format="pyarrow", batch_size=PARSE_BATCH_FILES)
        )

    def extract(self, pending: pa.Table) -> pa.Table:
        """Extract ``pending`` chunks on the NER actor pool."""
        batch, ray_cfg = self.cfg.ray.ner_batch_size, self.cfg.ray
        counter = self.hooks.counter("extract", unit="chunks", total=pending.num_rows)
        with self._watched("extract", ray_cfg.cpus_per_ner_actor, ray_cfg.gpus_per_ner_actor):
            return collect(
                ray.data.from_arrow(blocks(pending.drop_columns(["shard"]), batch)).map_batches(
                    ExtractAndPersist,
                    fn_constructor_args=(self.cfg, self.fs, self.staging),
                    fn_constructor_kwargs={"run": self.stage_run, "counter": counter},
                    batch_size=batch,
                    batch_format="pyarrow",
                    **self._actor_pool(ray_cfg.ner_actors, ray_cfg.cpus_per_ner_actor, ray_cfg.gpus_per_ner_actor),
                )
            )

    def merge(self, ok: pa.Table) -> MergeResult:
        if ok.num_rows < self.cfg.ray.merge_in_driver_below:
            # Without seconds of shuffle and actor start-up for a small input.
            return merge_in_process(self.cfg, ok)
        ds = ray.data.from_arrow(blocks(ok, 256))
        # Merge partitions: enough to spread a large corpus over the workers, few enough to keep calls cheap.
        parts = max(1, min(64, ok.num_rows // 2000 + 1))
        merged_entities = tables.conform(
            collect(
                ds.map_batches(ExplodeEntityMentions, fn_constructor_args=(self.cfg, parts), **_one_actor())
                .groupby("partition", num_partitions=parts)
                .map_groups(MergeEntityGroups, fn_constructor_args=(self.cfg,), **_one_actor())
            ),
            MERGED_ENTITIES,
        )
        relation_mentions = ds.map_batches(
            ExplodeRelationMentions, fn_constructor_args=(self.cfg, parts), **_one_actor()
        ).materialize()
        relation_mention_rows = collect(relation_mentions)
        merged_relations = tables.conform(
            collect(
                relation_mentions.groupby("partition", num_partitions=parts).map_groups(
                    MergeRelationGroups, fn_constructor_args=(self.cfg,), **_one_actor()
                )
            ),
            MERGED_RELATIONS,
        )
        where = f"on Ray in {parts} partition{'s' if parts > 1 else ''}"
        return MergeResult(merged_entities, merged_relations, relation_mention_rows, where)

    def summarize(self, long_rows: pa.Table, schema: pa.Schema) -> pa.Table:
        """LLM summaries on the NER actors."""
        ray_cfg = self.cfg.ray
        with self._watched("merge (LLM summaries)", ray_cfg.cpus_per_ner_actor, ray_cfg.gpus_per_ner_actor):
            return collect(
                ray.data.from_arrow(blocks(long_rows, ray_cfg.ner_batch_size)).map_batches(
                    SummarizeLongDescriptions,
                    fn_constructor_args=(self.cfg,),
                    batch_format="pyarrow",
                    fn_constructor_kwargs={"run": self.stage_run, "counter": self.hooks.counter("merge")},
                    batch_size=ray_cfg.ner_batch_size,
                    **self._actor_pool(ray_cfg.ner_actors, ray_cfg.cpus_per_ner_actor, ray_cfg.gpus_per_ner_actor),
                )
            )

    def embed(self, pending: pa.Table) -> pa.Table:
        batch, ray_cfg = self.cfg.ray.embed_batch_size, self.cfg.ray
        counter = self.hooks.counter("embed", unit="texts", total=pending.num_rows)
        with self._watched("embed", ray_cfg.cpus_per_embed_actor, ray_cfg.gpus_per_embed_actor):
            return collect(
                ray.data.from_arrow(blocks(pending, batch)).map_batches(
                    EmbedAndPersist,
                    fn_constructor_args=(self.cfg, self.fs, self.staging),
                    batch_size=batch,
                    fn_constructor_kwargs={"run": self.stage_run, "counter": counter},
                    batch_format="pyarrow",
                    **self._actor_pool(
                        ray_cfg.embed_actors, ray_cfg.cpus_per_embed_actor, ray_cfg.gpus_per_embed_actor
                    ),
                )
            )

    def totals(self) -> dict[str, Any]:
        totals: dict[str, Any] = ray.get(self.ledger.totals.remote())
        return totals

    def exhausted(self) -> str:
        return str(ray.get(self.ledger.exhausted.remote()))

    def check_nodes(self, staging: str, input_fs: pafs.FileSystem | None, input_paths: list[str]) -> None:
        """Refuse early when a node of the cluster does not share the output (or cannot read the inputs)."""
        if not self.cfg.ray.check_nodes or self._node_check is None:
            return
        reads = [ReadCheck(input_fs, tuple(input_paths), "input")] if input_fs is not None and input_paths else []
        self.nodes_checked = self._node_check(self.fs, staging, self.output_uri, reads=reads, what="output and input")

    def close(self) -> None:
        """End the ledger actor (its totals are read by then): a driver running many jobs keeps no idle ones."""
        try:
            ray.kill(self.ledger, no_restart=True)
        except Exception as exc:  # noqa: BLE001 - the run's result matters more than an actor's clean exit
            log.warning("ending the ledger actor failed: %s: %s", type(exc).__name__, exc)
