"""The index build as one top-down flow: ingest -> chunk -> extract rounds -> merge -> embed -> write -> publish a
generation, over an injected :class:`~hxd2_ray.stages.runner.StageRunner` (Ray Data in
``hxd2_ray.stages.ray_runner``, this process in ``hxd2_ray.stages.local_runner``).

A full build, an update (``--input`` into an output that holds an index), a delete and a dry run are this flow
with different inputs: :meth:`IndexBuild.run` picks the build, the rebuild (other graph settings), the update or
the estimate; :meth:`IndexBuild.delete` removes documents. The caller holds the output's build lock.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from hxd2_ray.errors import BudgetReached, EmptyCorpusError, HxdError, IndexNotFoundError
from hxd2_ray.index_store import tables
from hxd2_ray.index_store.generations import CorpusState, next_generation_id
from hxd2_ray.indexer import publish, steps
from hxd2_ray.indexer.context import BuildContext
from hxd2_ray.indexer.dry_run import dry_run
from hxd2_ray.indexer.release_change import RebuildNeededError, rebuild_message, staging_differences
from hxd2_ray.indexer.update import IndexUpdate
from hxd2_ray.stages import staging as st

if TYPE_CHECKING:
    from hxd2_ray.index_store.manifest import IndexManifest
    from hxd2_ray.stages.runner import InputListing


class IndexBuild(BuildContext):
    """One run of the index build over ``input_uri`` into ``output_uri`` (see the module's doc)."""

    def run(self) -> dict[str, Any]:
        """Build the index, or change it when the output already holds one (:class:`~.update.IndexUpdate`)."""
        started = time.perf_counter()
        current = self.current_manifest()
        if current is not None:
            self.check_release_change(current)
        self.check_staging_fingerprint()
        # Settings of the final graph only (synonym edges, title mentions) changed: the staged work is reused and
        # the input is built again into a new generation. Anything else that changed the fingerprint needs a new output.
        rebuild = current is not None and (current.fingerprint != self.fingerprint or self.options.rebuild)
        if rebuild and self.options.dry_run:
            raise HxdError(
                f"{self.output_uri} holds an index built with other graph settings (synonym edges, title "
                "mentions) or before one of them existed; a dry run estimates "
                "changes to an index of the same configuration (or a build into a new --output)"
            )
        self.start_runner()
        try:
            return self._run(current, rebuild, started)
        finally:
            self.runner.close()

    def check_release_change(self, current: IndexManifest) -> None:
        """An update of an index this release or config would extract differently stops before any work and asks
        for --rebuild (:mod:`.release_change`); with it, the staged work of the old build is dropped and the whole
        input built again into a new generation."""
        differences = staging_differences(current, self.cfg, self.prompts.version_hash)
        if not differences:
            return
        if not self.options.rebuild:
            raise RebuildNeededError(
                rebuild_message(self.output_uri, differences, int(current.counts.get("chunks", 0)))
            )
        self.hooks.say(
            f"--rebuild: {len(differences)} changes since the index was built; building the whole input again"
        )
        if st.exists(self.fs, self.staging):  # the old build's staged work is not this build's
            self.fs.delete_dir(self.staging)

    def _run(self, current: IndexManifest | None, rebuild: bool, started: float) -> dict[str, Any]:
        self.generation = next_generation_id(current)
        listing = self.list_input(self.input_uri)
        self.runner.check_nodes(self.staging, listing.fs, listing.paths)
        try:
            if self.options.dry_run:
                return dry_run(self, listing, current)
            if rebuild:
                self.log(
                    f"{self.output_uri} was built with other settings: building the input again into a new generation"
                    + ("" if self.options.rebuild else " (extractions and vectors are reused)")
                )
                summary = self.build(listing, parent=current)
            elif current is not None and self.options.sync:
                summary = IndexUpdate(self, current).sync(listing)
            elif current is not None:
                summary = IndexUpdate(self, current).upsert(listing)
            else:
                summary = self.build(listing)
        except BudgetReached as exc:
            return publish.stopped_summary(self, exc, current, started)
        summary["seconds_total"] = round(time.perf_counter() - started, 3)
        self.runner.compact_cache()
        return summary

    def build(self, listing: InputListing, parent: IndexManifest | None = None) -> dict[str, Any]:
        """A build from scratch (the output holds no index, or ``parent``, an index of other synonym settings):
        every stage over the whole input, reusing what is staged."""
        with self.clock.stage("ingest"):
            docs, quarantine, chunks = steps.ingest(self, listing)
        if docs.num_rows == 0:
            reasons = Counter(quarantine.column("reason").to_pylist())
            raise EmptyCorpusError(
                f"no valid document in {self.input_uri}: {quarantine.num_rows} files quarantined "
                f"({', '.join(f'{k}: {v}' for k, v in sorted(reasons.items())) or 'none'}); no index was written"
            )
        with self.clock.stage("extract"):
            extractions = steps.extract(self, chunks)
        with self.clock.stage("merge"):
            entities, relations = steps.merge(self, extractions)
        extractions = steps.without_mentions(extractions)
        with self.clock.stage("embed"):
            vectors = steps.embed(self, entities, relations, chunks)
        self.check_lock()
        ok = extractions.filter(pc.equal(extractions.column("error"), "")).column("chunk_id")
        state = CorpusState(
            sources=self.sources,
            documents=docs,
            chunks=chunks,
            quarantine=quarantine,
            entities=entities,
            relations=relations,
            merged_chunks=pa.table({"chunk_id": ok}, schema=tables.MERGED_CHUNKS),
        )
        with self.clock.stage("write"):
            families = publish.write(self, state, vectors)
        kind = "build" if parent is None else "rebuild"
        summary = publish.summary(self, state, extractions, families, kind=kind)
        publish.commit(
            self,
            summary,
            families,
            parent,
            kind,
            {"documents": docs.num_rows, "chunks": chunks.num_rows, "input": listing.fingerprint},
        )
        return summary

    def delete(self, doc_ids: list[str], source_paths: list[str]) -> dict[str, Any]:
        """Remove documents (by id, or every document read from a source path) from the index: a new generation.
        ``source_paths`` as documents record them (s3:// URIs as given, local paths absolute)."""
        started = time.perf_counter()
        current = self.current_manifest()
        if current is None:
            raise IndexNotFoundError(f"no index at {self.output_uri} (no manifest.json): nothing to delete from")
        if current.fingerprint != self.fingerprint:
            raise HxdError(
                f"{self.output_uri} was built with another configuration (fingerprint {current.fingerprint}, "
                f"this one {self.fingerprint}); delete with the index's own config (omit --config)"
            )
        self.start_runner()
        try:
            self.generation = next_generation_id(current)
            self.runner.check_nodes(self.staging, None, [])
            try:
                summary = IndexUpdate(self, current).delete(doc_ids, source_paths)
            except BudgetReached as exc:
                return publish.stopped_summary(self, exc, current, started)
            summary["seconds_total"] = round(time.perf_counter() - started, 3)
            self.runner.compact_cache()
            return summary
        finally:
            self.runner.close()

    # The stages, for callers that drive one of them (tests, benchmarks).

    def ingest(self, listing: InputListing) -> tuple[pa.Table, pa.Table, pa.Table]:
        return steps.ingest(self, listing)

    def extract(self, chunks: pa.Table) -> pa.Table:
        return steps.extract(self, chunks)

    def merge(self, extractions: pa.Table) -> tuple[pa.Table, pa.Table]:
        return steps.merge(self, extractions)

    def embed(self, entities: pa.Table, relations: pa.Table, chunks: pa.Table) -> pa.Table:
        return steps.embed(self, entities, relations, chunks)
