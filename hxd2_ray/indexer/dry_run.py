"""``hxd2 index --dry-run``: what would this run cost? Tokens, time and dollars, estimated from a sample.

The input is read and chunked as the run would (a build from scratch stages its ingest, so the real run skips it),
the chunks still to extract are counted, and an evenly spaced sample of them (``cost.dry_run_sample_chunks``) is
extracted for real on the runner (the NER actors on Ray): its calls and tokens per stage, scaled to all the chunks
to extract, and its seconds per chunk in an actor (start-up excluded), over ``ray.ner_actors`` actors, make the
estimate; prices come from ``cost.prices``. The sample's extractions are kept (staging and LLM cache), so the real
run does not pay for them again. Summaries of long merged descriptions depend on the whole corpus and are not estimated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from hxd2_ray.config import embedding_model_id, llm_model_id
from hxd2_ray.graph_assembly.embedding_texts import TOKENS_PER_WORD_ESTIMATE
from hxd2_ray.index_store.corpus import upsert
from hxd2_ray.index_store.generations import read_state
from hxd2_ray.indexer import steps
from hxd2_ray.stages.cost import PriceBook, estimate_run

if TYPE_CHECKING:
    from hxd2_ray.index_store.manifest import IndexManifest
    from hxd2_ray.indexer.context import BuildContext
    from hxd2_ray.stages.runner import InputListing


def evenly_spaced(table: pa.Table, n: int) -> pa.Table:
    """Up to ``n`` rows spread over the table (by chunk id order, so the same input gives the same sample)."""
    table = table.sort_by("id")
    if table.num_rows <= n:
        return table
    step = table.num_rows / n
    return table.take(pa.array([int(i * step) for i in range(n)], pa.int64()))


def dry_run(build: BuildContext, listing: InputListing, current: IndexManifest | None) -> dict[str, Any]:
    cfg = build.cfg
    with build.clock.stage("ingest"):
        if current is None:
            _, _, chunks = steps.ingest(build, listing)
        else:
            state = read_state(build.fs, build.root, current)
            chunks = upsert(state.sources, state.quarantine, state.chunks, steps.read_input(build, listing)).chunks
    extractions = steps.read_extractions(build, chunks)
    ok = pa.array(
        extractions.filter(pc.equal(extractions.column("error"), "")).column("chunk_id").to_pylist(), pa.string()
    )
    pending = chunks.filter(pc.invert(pc.is_in(chunks.column("id"), value_set=ok)))
    sample = evenly_spaced(pending, cfg.cost.dry_run_sample_chunks)
    seconds = 0.0
    mentions = 0
    if sample.num_rows:
        with build.clock.stage("extract"):
            stats = steps.run_extraction(build, sample)
        seconds = float(pc.sum(stats.column("seconds")).as_py() or 0.0)
        mentions = int(pc.sum(stats.column("entities")).as_py() or 0) + int(
            pc.sum(stats.column("relations")).as_py() or 0
        )
    usage = build.runner.totals()
    done = sample.num_rows
    per_chunk = seconds / done if done else 0.0
    chunk_words = sum(len(t.split()) for t in pending.column("text").to_pylist())
    # Entity and relation texts: two per mention at most (name and name+description, or keywords and mix); merging
    # makes fewer, so this bounds the embedding from above.
    mention_texts = round(2 * mentions / done * pending.num_rows) if done else 0
    embed_tokens = round(chunk_words * TOKENS_PER_WORD_ESTIMATE) + mention_texts * 24
    estimate = estimate_run(
        usage,
        done,
        pending.num_rows,
        seconds_per_chunk=per_chunk,
        actors=cfg.ray.ner_actors,
        embed_texts=pending.num_rows + mention_texts,
        embed_tokens=embed_tokens,
        prices=PriceBook(dict(cfg.cost.prices)),
        llm_model=llm_model_id(cfg.llm),
        embedding_model=embedding_model_id(cfg.embedding),
        gpus_per_actor=cfg.ray.gpus_per_ner_actor,
    )
    return {
        "status": "estimate",
        "input": build.input_uri,
        "output": build.output_uri,
        "chunks": chunks.num_rows,
        "chunks_extracted_before": chunks.num_rows - pending.num_rows,
        "sample": {"chunks": done, "seconds_in_actors": round(seconds, 3), "run": usage},
        "estimate": estimate,
        "prices": {m: p.model_dump() for m, p in cfg.cost.prices.items()},
        "unpriced_models": sorted({llm_model_id(cfg.llm), embedding_model_id(cfg.embedding)} - set(cfg.cost.prices)),
        "note": "the sample's extractions are kept: the real run extracts the other chunks",
        "seconds_per_stage": dict(build.clock.seconds),
    }
