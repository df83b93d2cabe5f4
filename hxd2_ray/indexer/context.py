"""What one run of the index build knows and keeps: its configuration, output, staging folder, stage clock,
counters and runner. The flow's steps (:mod:`.steps`, :mod:`.publish`, :mod:`.update`, :mod:`.dry_run`) read and
record through it."""

from __future__ import annotations

import posixpath
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from hxd2_ray.errors import HxdError
from hxd2_ray.extraction.prompts import load_prompts
from hxd2_ray.index_store import tables
from hxd2_ray.index_store.manifest import read_manifest
from hxd2_ray.index_store.output import open_output
from hxd2_ray.ingest.sources import resolve_filesystem, select_inputs
from hxd2_ray.stages import staging as st
from hxd2_ray.stages.runner import BuildHooks, InputListing, RunContext, RunnerFactory, RunOptions

if TYPE_CHECKING:
    from hxd2_ray.config import HxdConfig
    from hxd2_ray.index_store.disk_space import WriteSeam
    from hxd2_ray.index_store.manifest import IndexManifest
    from hxd2_ray.index_store.output import BuildOutput
    from hxd2_ray.ingest.sources import InputSelection
    from hxd2_ray.stages.runner import StageRunner

STAGES = ("ingest", "extract", "merge", "embed", "write")


class StageClock:
    def __init__(self, hooks: BuildHooks | None = None) -> None:
        self.hooks = hooks or BuildHooks()
        self.seconds: dict[str, float] = {}
        self.status: dict[str, str] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.hooks.log(f"stage {name} …")
        started = time.perf_counter()
        with self.hooks.stage(name, lambda: self.status.get(name, "ran")):
            yield
        self.seconds[name] = round(time.perf_counter() - started, 3)
        self.hooks.log(f"stage {name} done in {self.seconds[name]:.1f}s ({self.status.get(name, 'ran')})")


class BuildContext:
    """One run of the index build over ``input_uri`` into ``output_uri``, its stages run by ``runner``."""

    def __init__(
        self,
        cfg: HxdConfig,
        input_uri: str,
        output_uri: str,
        runner: RunnerFactory,
        options: RunOptions | None = None,
        output: BuildOutput | None = None,
        inputs: InputSelection | None = None,
        hooks: BuildHooks | None = None,
    ) -> None:
        """``output``: the :class:`BuildOutput` (opened and locked) the caller holds; ``inputs``: its
        :class:`InputSelection` of ``input_uri``. Without them the output is opened here and the input walked in
        :meth:`list_input`."""
        self.cfg = cfg
        self.input_uri = input_uri
        self.output_uri = output_uri
        self.make_runner = runner
        self.options = options or RunOptions()
        self.output = output
        self.inputs = inputs
        self.hooks = hooks or BuildHooks()
        opened: tuple[pafs.FileSystem, str] = (
            (output.fs, output.root) if output is not None else open_output(output_uri, cfg.s3)
        )
        self.fs, self.root = opened
        self.staging = posixpath.join(self.root, "_staging")
        self.prompts = load_prompts()
        self.fingerprint = cfg.index_fingerprint(self.prompts.version_hash)
        # What the staged rows depend on: synonym settings shape only the write stage, so changing them reuses
        # the extraction (and an index built before synonym edges existed can be rebuilt from its staging).
        self.staging_fingerprint = cfg.staging_fingerprint(self.prompts.version_hash)
        self.clock = StageClock(self.hooks)
        self.counters: Counter[str] = Counter()
        self.files: dict[str, dict[str, Any]] = {}  # sizes and sha256 of the written generation's files
        self.refusal: dict[str, Any] | None = None  # the refusal calibration of the write stage
        self.write_seam: WriteSeam | None = None  # the write stage's, with its estimate of the space needed
        self.runner: StageRunner  # started by start_runner(), once a run begins
        self.generation = ""  # the generation this run writes
        self.sources = tables.SOURCES.empty_table()
        self.stop: dict[str, Any] = {}  # where a budget stopped the run
        # Entities whose per-entity derived data (synonym edges, ...) the write stage must redo; None: all of them.
        self.changed_entity_keys: set[str] | None = None

    def log(self, msg: str) -> None:
        self.hooks.log(msg)

    def start_runner(self) -> StageRunner:
        self.runner = self.make_runner(
            RunContext(
                cfg=self.cfg,
                options=self.options,
                fs=self.fs,
                root=self.root,
                staging=self.staging,
                output_uri=self.output_uri,
                prompt_version=self.prompts.version_hash,
                hooks=self.hooks,
            )
        )
        return self.runner

    def stage_path(self, *parts: str) -> str:
        return posixpath.join(self.staging, *parts)

    def marker(self, stage: str) -> dict[str, Any] | None:
        return st.read_json(self.fs, self.stage_path("_stages", f"{stage}.json"))

    def mark(self, stage: str, payload: dict[str, Any]) -> None:
        st.write_json_atomic(self.fs, self.stage_path("_stages", f"{stage}.json"), payload)

    def check_lock(self) -> None:
        if self.output is not None:
            self.output.lock.check_held()  # an S3 lock taken over by another build: stop before publishing

    def check_staging_fingerprint(self) -> None:
        build = st.read_json(self.fs, self.stage_path("build.json"))
        if build is None:
            st.write_json_atomic(self.fs, self.stage_path("build.json"), {"fingerprint": self.staging_fingerprint})
        elif build.get("fingerprint") != self.staging_fingerprint:
            # Never advise --overwrite over a published index: it would wipe a working index to build another one.
            fresh = "" if self.current_manifest() is not None else ", or --overwrite to drop the partial work"
            raise HxdError(
                f"{self.output_uri} holds a partial build made with another configuration (fingerprint "
                f"{build.get('fingerprint')}, this run {self.staging_fingerprint}); rerun with the --config and --set "
                f"values it was started with, or build into a new --output{fresh}"
            )

    def current_manifest(self) -> IndexManifest | None:
        if not st.exists(self.fs, posixpath.join(self.root, "manifest.json")):
            return None
        return read_manifest(posixpath.join(self.root, "manifest.json"), filesystem=self.fs)

    def list_input(self, input_uri: str) -> InputListing:
        # Walked by real path, the output never entered; oversized, unsupported and unreachable files are
        # quarantined from the listing alone, so no worker ever fetches them.
        selection = (
            self.inputs
            if self.inputs is not None and input_uri == self.input_uri
            else select_inputs(input_uri, self.cfg.ingest, self.cfg.s3, exclude=(self.output_uri,))
        )
        in_fs, _ = resolve_filesystem(selection.readable[0], self.cfg.s3)
        paths = [resolve_filesystem(f, self.cfg.s3)[1] for f in selection.readable]
        input_fp = st.fingerprint_of(
            [f"{i.path}|{i.size}|{i.mtime_ns}" for i in selection.infos]
            + [f"{q.source_path}|{q.reason}" for q in selection.rejected]
        )
        return InputListing(selection.files, in_fs, paths, input_fp, list(selection.rejected), selection.readable)
