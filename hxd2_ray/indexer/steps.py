"""The build's stages over a :class:`~.context.BuildContext`: ingest, extract, merge (with summaries), embed.

Each stage persists its results under ``<output>/_staging`` before the next starts, so a rerun after a crash skips
finished work: ingest and merge by input fingerprint, extraction and embedding per row. The units of work run on
the context's :class:`~hxd2_ray.stages.runner.StageRunner`; what to run, and what its results mean, is decided here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from hxd2_ray.errors import BudgetReached, HxdError
from hxd2_ray.extraction.merge import missing_endpoint_entities
from hxd2_ray.graph_assembly.embedding_texts import TEXT_VECTORS_FOLDER, embedding_inputs, text_keys, texts_to_embed
from hxd2_ray.graph_assembly.incremental import MERGED_ENTITIES, MERGED_RELATIONS, entities_table
from hxd2_ray.index_store import tables
from hxd2_ray.index_store.corpus import corpus_from_parsed, derive_documents, sources_from_documents
from hxd2_ray.stages import staging as st
from hxd2_ray.stages.columns import PARSED, naming_unknown, parsed_rows
from hxd2_ray.stages.faults import crash_point
from hxd2_ray.types import RelationMention, vector_id

if TYPE_CHECKING:
    from hxd2_ray.index_store.corpus import ParsedCorpus
    from hxd2_ray.indexer.context import BuildContext
    from hxd2_ray.stages.runner import InputListing


def read_input(b: BuildContext, listing: InputListing) -> ParsedCorpus:
    """Parse the listed files on the runner: their documents, quarantined files and chunks."""
    parts = [parsed_rows([], listing.prechecked)]
    if listing.readable:
        parts.append(b.runner.parse(listing))
    parsed = pa.concat_tables([tables.conform(p, PARSED) for p in parts])
    # The same text in two files is one document (its id is the content hash): sources keep both, the
    # documents table the first in path order (hxd2_ray.index_store.corpus).
    return corpus_from_parsed(parsed, b.cfg.ray.extraction_shards, paths=listing.files)


_MENTION_COLUMNS = ("entities", "relations", "content_keywords")


def ingest(b: BuildContext, listing: InputListing) -> tuple[pa.Table, pa.Table, pa.Table]:
    marker = b.marker("ingest")
    if marker and marker.get("input") == listing.fingerprint:
        b.clock.status["ingest"] = "skipped: finished earlier"
        docs = st.read_staged(b.fs, b.stage_path("documents"), tables.DOCUMENTS).table
        quarantine = st.read_staged(b.fs, b.stage_path("quarantine"), tables.QUARANTINE).table
        chunks = st.read_staged(b.fs, b.stage_path("chunks"), tables.CHUNKS).table
        b.sources = st.read_staged(b.fs, b.stage_path("sources"), tables.SOURCES).table
        if b.sources.num_rows == 0:  # staged by a version that did not record sources
            b.sources = sources_from_documents(docs)
        b.counters["duplicate_documents"] = b.sources.num_rows - docs.num_rows
        return docs, quarantine, chunks

    corpus = read_input(b, listing)
    b.sources, quarantine, chunks = corpus.sources, corpus.quarantine, corpus.chunks
    docs = derive_documents(b.sources)
    b.counters["duplicate_documents"] = b.sources.num_rows - docs.num_rows
    n_shards = b.cfg.ray.extraction_shards

    # Replace whatever an interrupted ingest left, then mark the stage done.
    for sub in ("sources", "documents", "quarantine", "chunks"):
        st.remove_files(b.fs, st.list_parquet(b.fs, b.stage_path(sub)))
    st.write_table_atomic(b.fs, b.stage_path("sources", "part-0000.parquet"), b.sources)
    st.write_table_atomic(b.fs, b.stage_path("documents", "part-0000.parquet"), docs)
    crash_point("driver:ingest")
    st.write_table_atomic(b.fs, b.stage_path("quarantine", "part-0000.parquet"), quarantine)
    for s in range(n_shards):
        part = chunks.filter(pc.equal(chunks.column("shard"), s))
        if part.num_rows:
            st.write_table_atomic(b.fs, b.stage_path("chunks", f"shard-{s:04d}.parquet"), part)
    b.mark("ingest", {"input": listing.fingerprint, "documents": docs.num_rows, "chunks": chunks.num_rows})
    b.clock.status["ingest"] = f"ran on {len(listing.files)} files"
    return docs, quarantine, chunks


def extract(b: BuildContext, chunks: pa.Table) -> pa.Table:
    folder = b.stage_path("extractions")
    existing = st.read_staged(b.fs, folder, tables.EXTRACTIONS, columns=["chunk_id", "error"])
    if existing.unreadable:
        b.hooks.say(f"removing {len(existing.unreadable)} unreadable extraction files left by a crash")
        st.remove_files(b.fs, existing.unreadable)
    ok = existing.table.filter(pc.equal(existing.table.column("error"), ""))
    done = pa.array(sorted(set(ok.column("chunk_id").to_pylist())), pa.string())
    pending = chunks.filter(pc.invert(pc.is_in(chunks.column("id"), value_set=done)))
    if pending.num_rows:
        b.clock.status["extract"] = f"ran on {pending.num_rows} of {chunks.num_rows} chunks"
        stats = run_extraction(b, pending)
        b.counters["extraction_batches"] = stats.num_rows
        b.counters["extract_skipped_chunks"] = int(pc.sum(stats.column("skipped")).as_py() or 0)
    else:
        b.clock.status["extract"] = "skipped: every chunk extracted earlier"
    extractions = read_extractions(b, chunks)
    if b.counters["extract_skipped_chunks"]:
        extracted = int(pc.sum(pc.equal(extractions.column("error"), "")).as_py() or 0)
        b.stop = {
            "stage": "extract",
            "chunks": chunks.num_rows,
            "chunks_extracted": extracted,
            "chunks_left": chunks.num_rows - extracted,
        }
        b.clock.status["extract"] += f", stopped: {b.counters['extract_skipped_chunks']} chunks not started"
        raise BudgetReached(
            f"{b.runner.exhausted()}; {chunks.num_rows - extracted} of {chunks.num_rows} chunks still to extract"
        )
    return extractions


def read_extractions(b: BuildContext, chunks: pa.Table) -> pa.Table:
    """One staged extraction per chunk of ``chunks`` (a successful one where any exists)."""
    staged = st.read_staged(b.fs, b.stage_path("extractions"), tables.EXTRACTIONS).table
    return latest_per_chunk(staged, chunks)


def run_extraction(b: BuildContext, pending: pa.Table) -> pa.Table:
    """Extract ``pending`` chunks on the runner; every file a worker reports is checked here."""
    stats = b.runner.extract(pending)
    b.runner.check_reported(stats, "extract")
    return stats


def merge(b: BuildContext, extractions: pa.Table) -> tuple[pa.Table, pa.Table]:
    input_fp = st.fingerprint_of(
        f"{c}|{e}"
        for c, e in zip(
            extractions.column("chunk_id").to_pylist(), extractions.column("error").to_pylist(), strict=True
        )
    )
    marker = b.marker("merge")
    if marker and marker.get("input") == input_fp:
        b.clock.status["merge"] = "skipped: finished earlier"
        ents = st.read_staged(b.fs, b.stage_path("entities"), tables.ENTITIES).table
        rels = st.read_staged(b.fs, b.stage_path("relations"), tables.RELATIONS).table
        b.counters["summarized_descriptions"] = marker.get("summarized", 0)
        return ents, rels

    ok = extractions.filter(pc.equal(extractions.column("error"), ""))
    merged_entities, merged_relations, relation_mention_rows, where = b.runner.merge(ok)

    summarized = 0
    for name, merged, schema in (
        ("entities", merged_entities, MERGED_ENTITIES),
        ("relations", merged_relations, MERGED_RELATIONS),
    ):
        long_rows = merged.filter(merged.column("needs_summary"))
        if not long_rows.num_rows:
            continue
        summaries = summarize(b, long_rows, schema, name)
        summarized += summaries.num_rows
        rest = merged.filter(pc.invert(merged.column("needs_summary")))
        merged = pa.concat_tables([rest, summaries])
        if name == "entities":
            merged_entities = merged
        else:
            merged_relations = merged

    # A relation needs both endpoints as nodes; endpoints never extracted as entities get type "unknown".
    known = set(merged_entities.column("key").to_pylist())
    endpoints = set(merged_relations.column("source_key").to_pylist()) | set(
        merged_relations.column("target_key").to_pylist()
    )
    missing = []
    if endpoints - known:
        # Only the mentions naming an endpoint that is not an entity matter; the rest stay Arrow, not dicts.
        mention_rows = naming_unknown(relation_mention_rows, known).to_pylist()
        missing = missing_endpoint_entities(
            known,
            (
                RelationMention(
                    r["source"],
                    r["target"],
                    r["description"],
                    tuple(r["keywords"] or ()),
                    r["strength"],
                    r["chunk_id"],
                )
                for r in mention_rows
            ),
            b.cfg.extraction,
        )
    if missing:
        merged_entities = pa.concat_tables([merged_entities, entities_table(missing)])
    b.counters["endpoint_only_entities"] = len(missing)
    b.counters["summarized_descriptions"] = summarized

    ents = tables.conform(merged_entities.sort_by("key"), tables.ENTITIES)
    rels = tables.conform(
        merged_relations.sort_by([("source_key", "ascending"), ("target_key", "ascending")]), tables.RELATIONS
    )
    for sub, table in (("entities", ents), ("relations", rels)):
        st.remove_files(b.fs, st.list_parquet(b.fs, b.stage_path(sub)))
        st.write_table_atomic(b.fs, b.stage_path(sub, "part-0000.parquet"), table)
        crash_point("driver:merge")
    b.mark(
        "merge",
        {"input": input_fp, "entities": ents.num_rows, "relations": rels.num_rows, "summarized": summarized},
    )
    b.clock.status["merge"] = f"merged {ok.num_rows} chunk extractions {where}"
    return ents, rels


def without_mentions(extractions: pa.Table) -> pa.Table:
    """The extractions without what was extracted (entities, relations, keywords): once merged, the flow keeps
    only the per-chunk tallies and errors its summary counts, not the largest table of the job for the embed and
    write stages."""
    return extractions.drop_columns([c for c in _MENTION_COLUMNS if c in extractions.column_names])


def summarize(b: BuildContext, long_rows: pa.Table, schema: pa.Schema, name: str) -> pa.Table:
    """LLM summaries of merged rows over the description budget (entities or relations), on the runner.

    Raises :class:`BudgetReached` when the run's budget stopped some batches: nothing merged is staged then,
    and the rerun finds the summaries made so far in the LLM cache."""
    if not long_rows.num_rows:
        return schema.empty_table()
    b.log(f"summarising {long_rows.num_rows} {name} descriptions over the token budget")
    summaries = tables.conform(b.runner.summarize(long_rows, schema), schema)
    if summaries.num_rows < long_rows.num_rows:
        b.stop = {
            "stage": "merge",
            "summaries": long_rows.num_rows,
            "summaries_done": summaries.num_rows,
            "summaries_left": long_rows.num_rows - summaries.num_rows,
        }
        raise BudgetReached(
            f"{b.runner.exhausted()}; {long_rows.num_rows - summaries.num_rows} of "
            f"{long_rows.num_rows} {name} summaries still to write"
        )
    return summaries


def embed(b: BuildContext, entities: pa.Table, relations: pa.Table, chunks: pa.Table) -> pa.Table:
    """The vector of every (family, key) of these tables (``EMBEDDINGS``). Vectors are stored by the text they
    embed, so only texts never embedded before are: a changed description gets a new vector, and keys that
    are gone simply have none to return."""
    inputs = embedding_inputs(entities, relations, chunks)
    keys = text_keys(inputs.column("text"))
    folder = b.stage_path(TEXT_VECTORS_FOLDER)
    existing = st.read_staged(b.fs, folder, tables.TEXT_VECTORS, columns=["text_key"])
    if existing.unreadable:
        st.remove_files(b.fs, existing.unreadable)
    pending = texts_to_embed(keys, inputs.column("text"), existing.table.column("text_key").combine_chunks())
    if pending.num_rows:
        b.clock.status["embed"] = (
            f"ran on {pending.num_rows} of {len(pc.unique(keys))} distinct texts ({inputs.num_rows} vectors)"
        )
        stats = b.runner.embed(pending)
        b.runner.check_reported(stats, "embed")
        b.counters["embedded_texts"] = int(pc.sum(stats.column("vectors")).as_py() or 0)
        failed = int(pc.sum(stats.column("failed")).as_py() or 0) if stats.num_rows else 0
        if failed:
            errors = sorted({e for e in stats.column("error").to_pylist() if e})
            raise HxdError(
                f"{failed} texts could not be embedded after retries ({'; '.join(errors[:3])}); "
                "they are recorded and a rerun embeds only what is missing"
            )
        skipped = int(pc.sum(stats.column("skipped")).as_py() or 0)
        if skipped:
            b.stop = {"stage": "embed", "texts": pending.num_rows, "texts_left": skipped}
            raise BudgetReached(f"{b.runner.exhausted()}; {skipped} of {pending.num_rows} texts still to embed")
    else:
        b.clock.status["embed"] = "skipped: every text embedded earlier"
    stored_vectors = st.read_staged(b.fs, folder, tables.TEXT_VECTORS).table
    # The first stored row of each text (a crashed run may have staged one twice), found in Arrow.
    rows = pc.index_in(keys, value_set=stored_vectors.column("text_key").combine_chunks())
    if rows.null_count:
        raise HxdError(f"{rows.null_count} texts have no staged vector after the embed stage; rerun the build")
    return pa.table(
        {
            "family": inputs.column("family"),
            "key": inputs.column("key"),
            "vector_id": vector_ids(inputs.column("key")),
            "vector": stored_vectors.column("vector").take(rows),
        },
        schema=tables.EMBEDDINGS,
    )


def vector_ids(keys: pa.ChunkedArray, batch_rows: int = 65_536) -> pa.Array:
    """:func:`~hxd2_ray.types.vector_id` of every key, converted ``batch_rows`` keys at a time."""
    parts = [
        pa.array([vector_id(k) for k in keys.slice(start, batch_rows).to_pylist()], pa.int64())
        for start in range(0, len(keys), batch_rows)
    ]
    return pa.concat_arrays(parts) if parts else pa.array([], pa.int64())


def latest_per_chunk(extractions: pa.Table, chunks: pa.Table) -> pa.Table:
    """One extraction per current chunk, by chunk id: its first successful one if any exists, else its first
    recorded failure (rows in staged order).

    Arrow sorts, not a Python pass: at 500k chunks the staged rows come in thousands of pieces, and reading one
    row's id at a time took minutes in the driver."""
    rows = pa.table(
        {
            "chunk_id": extractions.column("chunk_id"),
            "failed": pc.not_equal(extractions.column("error"), ""),
            "row": pa.array(range(extractions.num_rows), pa.int64()),
        }
    ).filter(pc.is_in(extractions.column("chunk_id"), value_set=chunks.column("id")))
    if rows.num_rows == 0:
        return tables.EXTRACTIONS.empty_table()
    rows = rows.sort_by([("chunk_id", "ascending"), ("failed", "ascending"), ("row", "ascending")])
    ids = rows.column("chunk_id").combine_chunks()
    first_of_chunk = pa.concat_arrays([pa.array([True]), pc.not_equal(ids.slice(1), ids.slice(0, len(ids) - 1))])
    return extractions.take(rows.column("row").filter(first_of_chunk))
