"""Incremental maintenance of an index: add or update documents, delete documents; each change a new generation.

A change starts from the current generation's corpus tables (:mod:`hxd2_ray.index_store.generations`), applies the
document change (:mod:`hxd2_ray.index_store.corpus`), extracts only chunks with no successful extraction (new ones,
and earlier failures, which an update heals), re-merges only the entities and relations whose provenance the
change touches (:mod:`hxd2_ray.graph_assembly.incremental`; their summaries through the LLM cache), embeds only texts
never embedded, then writes a new generation and switches the manifest to it. The result equals a build of the
final corpus from scratch; readers of the old generation keep working until they reopen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from hxd2_ray.errors import EmptyCorpusError
from hxd2_ray.graph_assembly.incremental import (
    MERGED_ENTITIES,
    MERGED_RELATIONS,
    ExtractionIndex,
    apply,
    changed_entity_keys,
    remerge,
)
from hxd2_ray.index_store import tables
from hxd2_ray.index_store.corpus import CorpusChange, NothingToDeleteError, delete, missing_from, sync, upsert
from hxd2_ray.index_store.generations import CorpusState, read_state
from hxd2_ray.indexer import publish, steps
from hxd2_ray.llm.tokens import build_token_counter
from hxd2_ray.stages.faults import crash_point

if TYPE_CHECKING:
    from hxd2_ray.index_store.manifest import IndexManifest
    from hxd2_ray.indexer.context import BuildContext
    from hxd2_ray.stages.runner import InputListing

# What a delete named, kept in its generation's history entry (enough to know a repeat; ids past it are counted)
DELETE_REQUEST_KEPT = 1000


class IndexUpdate:
    """One change of the index at ``build.output_uri`` (whose current manifest is ``current``)."""

    def __init__(self, build: BuildContext, current: IndexManifest) -> None:
        self.build = build
        self.current = current
        self.state = read_state(build.fs, build.root, current)

    def upsert(self, listing: InputListing) -> dict[str, Any]:
        b = self.build
        if self.input_already_applied(listing.fingerprint):
            b.clock.status["ingest"] = (
                f"skipped: the same input (paths, sizes, times) made generation "
                f"{self.current.generation} and every chunk is extracted"
            )
            return self.unchanged(None)
        with b.clock.stage("ingest"):
            incoming = steps.read_input(b, listing)
            change = upsert(self.state.sources, self.state.quarantine, self.state.chunks, incoming)
            b.clock.status["ingest"] = (
                f"read {len(listing.files)} files: {len(change.added)} new and "
                f"{len(change.updated)} changed documents, {change.unchanged} unchanged"
            )
            crash_point("driver:ingest")  # crash tests: the change computed, nothing of it written
        summary = self.apply(change, "update", heal=True, input_fingerprint=listing.fingerprint)
        summary["missing_from_input"] = missing_from(change.sources, listed(listing))
        return summary

    def sync(self, listing: InputListing) -> dict[str, Any]:
        """The index made exactly the input (``hxd2 index --sync``): new and changed documents indexed, and those
        whose files the input no longer holds deleted, in one generation."""
        b = self.build
        if self.input_already_applied(listing.fingerprint) and self.current.generations[-1].get("kind") == "sync":
            b.clock.status["ingest"] = f"skipped: the same input made generation {self.current.generation}"
            return self.unchanged(None)
        with b.clock.stage("ingest"):
            incoming = steps.read_input(b, listing)
            change = sync(self.state.sources, self.state.quarantine, self.state.chunks, incoming, listed(listing))
            b.clock.status["ingest"] = (
                f"read {len(listing.files)} files: {len(change.added)} new, {len(change.updated)} changed and "
                f"{len(change.deleted)} gone documents, {change.unchanged} unchanged"
            )
            crash_point("driver:ingest")  # crash tests: the change computed, nothing of it written
        return self.apply(change, "sync", heal=True, input_fingerprint=listing.fingerprint)

    def input_already_applied(self, fingerprint: str) -> bool:
        """The current generation was made from exactly this input listing, and no chunk of it waits for an
        extraction: reading the input again cannot change anything."""
        made_by = self.current.generations[-1].get("change", {}).get("input") if self.current.generations else None
        if made_by != fingerprint:
            return False
        return set(self.state.chunks.column("id").to_pylist()) <= self.state.merged_chunk_ids()

    def delete(self, doc_ids: list[str], source_paths: list[str]) -> dict[str, Any]:
        b = self.build
        with b.clock.stage("ingest"):
            try:
                change = delete(self.state.sources, self.state.quarantine, self.state.chunks, doc_ids, source_paths)
            except NothingToDeleteError as exc:
                done_in = self.deleted_before(exc.unknown_ids, exc.missing_sources)
                if done_in is None:
                    raise  # a typo deletes nothing, and says so
                b.clock.status["ingest"] = f"already deleted in generation {done_in}"
                summary = self.unchanged(None)
                summary["reason"] = (
                    f"nothing to delete: what was named was deleted already (generation {done_in});"
                    " the index is unchanged"
                )
                return summary
            b.clock.status["ingest"] = f"{len(change.deleted)} documents to delete"
            crash_point("driver:ingest")  # crash tests: the change computed, nothing of it written
        request = {"doc_ids": doc_ids[:DELETE_REQUEST_KEPT], "sources": source_paths[:DELETE_REQUEST_KEPT]}
        return self.apply(change, "delete", heal=False, request=request)

    def deleted_before(self, doc_ids: Sequence[str], sources: Sequence[str]) -> str | None:
        """The generation whose delete named all of these, so that a repeated delete is a no-op; None if any of
        them was never deleted (then it is a mistake to report)."""
        asked_ids: set[str] = set()
        asked_sources: set[str] = set()
        last = None
        for entry in self.current.generations:
            request = (entry.get("change") or {}).get("request") if entry.get("kind") == "delete" else None
            if request:
                asked_ids |= set(request.get("doc_ids") or ())
                asked_sources |= set(request.get("sources") or ())
                last = entry.get("id")
        if set(doc_ids) <= asked_ids and set(sources) <= asked_sources and (doc_ids or sources):
            return last
        return None

    def apply(
        self,
        change: CorpusChange,
        kind: str,
        heal: bool,
        input_fingerprint: str = "",
        request: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Bring the index to ``change``'s corpus. ``heal``: also extract the chunks whose extraction failed in
        earlier runs (an update may call the LLM; a delete never does)."""
        b, state = self.build, self.state
        if change.documents.num_rows == 0:
            raise EmptyCorpusError(
                f"the change would leave {b.output_uri} without any document; nothing was "
                "changed (remove the index folder to drop it whole)"
            )
        with b.clock.stage("extract"):
            if heal:
                extractions = steps.extract(b, change.chunks)
            else:
                extractions = steps.read_extractions(b, change.chunks)
                b.clock.status["extract"] = "skipped: a delete extracts nothing"
        ok_now = set(extractions.filter(pc.equal(extractions.column("error"), "")).column("chunk_id").to_pylist())
        merged_before = state.merged_chunk_ids()
        removed, added = merged_before - ok_now, ok_now - merged_before
        quarantine_changed = change.quarantine.to_pylist() != state.quarantine.to_pylist()
        if not (change.changed or removed or added or quarantine_changed):
            return self.unchanged(change)

        with b.clock.stage("merge"):
            entities, relations, stats = self.remerge(removed, added, extractions)
            extractions = steps.without_mentions(extractions)
            crash_point("driver:merge")  # crash tests: the graph merged again in memory, not yet embedded
            b.clock.status["merge"] = (
                f"re-merged {stats['entities_recomputed']} entities and "
                f"{stats['relations_recomputed']} relations touched by {len(removed)} removed "
                f"and {len(added)} added chunks"
            )
        with b.clock.stage("embed"):
            vectors = steps.embed(b, entities, relations, change.chunks)
        b.check_lock()
        new_state = CorpusState(
            sources=change.sources,
            documents=change.documents,
            chunks=change.chunks,
            quarantine=change.quarantine,
            entities=entities,
            relations=relations,
            merged_chunks=pa.table({"chunk_id": sorted(ok_now)}, schema=tables.MERGED_CHUNKS),
        )
        with b.clock.stage("write"):
            families = publish.write(b, new_state, vectors)
        described = {**change.describe(), **stats, "chunks_merged_in": len(added), "chunks_merged_out": len(removed)}
        summary = publish.summary(b, new_state, extractions, families, kind=kind, change=described)
        recorded: dict[str, Any] = {k: v for k, v in described.items() if k != "document_ids"}
        if input_fingerprint:
            recorded["input"] = input_fingerprint
        if request:
            recorded["request"] = request  # what a delete named: a repeat of it is then a no-op
        publish.commit(b, summary, families, self.current, kind, recorded)
        return summary

    def remerge(
        self, removed: set[str], added: set[str], extractions: pa.Table
    ) -> tuple[pa.Table, pa.Table, dict[str, int]]:
        """The new entity and relation tables: the rows the change touches merged again (and summarized when
        over the budget), the others as they were."""
        b, state = self.build, self.state
        cfg = b.cfg
        remerged = remerge(
            state.entities,
            state.relations,
            removed,
            added,
            ExtractionIndex(extractions),
            cfg.extraction,
            build_token_counter(cfg.llm),
        )
        finished = []
        summarized = 0
        for name, rows, schema in (
            ("entities", remerged.entities, MERGED_ENTITIES),
            ("relations", remerged.relations, MERGED_RELATIONS),
        ):
            long_rows = rows.filter(rows.column("needs_summary"))
            summaries = steps.summarize(b, long_rows, schema, name)
            summarized += summaries.num_rows
            finished.append(pa.concat_tables([rows.filter(pc.invert(rows.column("needs_summary"))), summaries]))
        entities, relations = apply(state.entities, state.relations, remerged, finished[0], finished[1])
        # Data derived per entity (synonym edges, ...) must be redone for these keys only: the write stage reads
        # them here (None in a build from scratch: every entity).
        b.changed_entity_keys = changed_entity_keys(state.entities, entities, remerged)
        b.counters["summarized_descriptions"] = summarized
        # Counted as a build cannot here (the rows untouched by the change are not re-derived): untyped entities
        # without a description, which is what an endpoint-only entity is.
        b.counters["endpoint_only_entities"] = int(
            pc.sum(
                pc.and_(pc.equal(entities.column("type"), "unknown"), pc.equal(entities.column("description"), ""))
            ).as_py()
            or 0
        )
        stats = {
            **remerged.stats,
            "extractions_read": remerged.chunks_read,
            "entities_changed": len(b.changed_entity_keys),
        }
        return entities, relations, stats

    def unchanged(self, change: CorpusChange | None) -> dict[str, Any]:
        """The summary of a run that found nothing to do (``change`` None: the input was not read again)."""
        b = self.build
        known = f"{change.unchanged} already indexed" if change is not None else "the input is unchanged"
        return {
            "status": "unchanged",
            "reason": f"no document was added, changed or removed ({known}) and no chunk is left to extract",
            "input": b.input_uri,
            "output": b.output_uri,
            "generation": self.current.generation,
            "documents": self.state.documents.num_rows,
            "chunks": self.state.chunks.num_rows,
            "entities": self.state.entities.num_rows,
            "relations": self.state.relations.num_rows,
            "quarantined_files": self.state.quarantine.num_rows,
            "run": b.runner.totals(),
            "llm_cache": b.runner.cache_summary(),
            "seconds_per_stage": dict(b.clock.seconds),
            "stage_status": dict(b.clock.status),
        }


def listed(listing: InputListing) -> set[str]:
    """Every path the input listing holds, read or quarantined."""
    rejected = {str(getattr(q, "source_path", "")) for q in listing.prechecked}
    return set(listing.files) | set(listing.paths) | rejected
