"""``hxd2 index --dry-run``: what would this run cost? Tokens, time and dollars, estimated from a sample.

The input is read and chunked as the run would (a build from scratch stages its ingest, so the real run skips it),
the chunks still to extract are counted, and an evenly spaced sample of them (``cost.dry_run_sample_chunks``) is
extracted for real on the NER actors: its calls and tokens per stage, scaled to all the chunks to extract, and its
seconds per chunk in an actor (start-up excluded), over ``ray.ner_actors`` actors, make the estimate; prices come
from ``cost.prices``. The sample's extractions are kept (staging and LLM cache), so the real run does not pay for
them again. Summaries of long merged descriptions depend on the whole corpus and are not estimated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from hxd2_ray.config import embedding_model_id, llm_model_id
from hxd2_ray.indexing.cost import PriceBook, estimate_run
from hxd2_ray.stages.embed_stage import TOKENS_PER_WORD_ESTIMATE

if TYPE_CHECKING:
    from hxd2_ray.indexing.manifest import IndexManifest
    from jobs.index import IndexBuild, InputListing


def evenly_spaced(table: pa.Table, n: int) -> pa.Table:
    """Up to ``n`` rows spread over the table (by chunk id order, so the same input gives the same sample)."""
    table = table.sort_by("id")
    if table.num_rows <= n:
        return table
    step = table.num_rows / n
    return table.take(pa.array([int(i * step) for i in range(n)], pa.int64()))


def dry_run(build: IndexBuild, listing: InputListing, current: IndexManifest | None) -> dict[str, Any]:
    cfg = build.cfg
    with build.clock.stage("ingest"):
        if current is None:
            _, _, chunks = build.ingest(listing)
        else:
            from hxd2_ray.indexing.corpus import upsert
            from hxd2_ray.indexing.generations import read_state

            state = read_state(build.fs, build.root, current)
            chunks = upsert(state.sources, state.quarantine, state.chunks, build.read_input(listing)).chunks
    extractions = build.read_extractions(chunks)
    ok = pa.array(
        extractions.filter(pc.equal(extractions.column("error"), "")).column("chunk_id").to_pylist(), pa.string()
    )
    pending = chunks.filter(pc.invert(pc.is_in(chunks.column("id"), value_set=ok)))
    sample = evenly_spaced(pending, cfg.cost.dry_run_sample_chunks)
    seconds = 0.0
    mentions = 0
    if sample.num_rows:
        with build.clock.stage("extract"):
            stats = build.run_extraction(sample)
        seconds = float(pc.sum(stats.column("seconds")).as_py() or 0.0)
        mentions = int(pc.sum(stats.column("entities")).as_py() or 0) + int(
            pc.sum(stats.column("relations")).as_py() or 0
        )
    usage = build.services.totals()
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


def format_estimate(summary: dict[str, Any]) -> str:
    est = summary["estimate"]
    lines = [
        f"dry run of {summary['input']} -> {summary['output']}: {summary['chunks']:,} chunks, "
        f"{est['chunks_to_extract']:,} to extract (estimated from {summary['sample']['chunks']} sampled)",
        f"  LLM calls ~{est['llm_calls']:,}, LLM tokens ~{est['llm_tokens']:,}, extraction time "
        f"~{est['extract_seconds']:,.0f} s on the NER actors, cost ~${est['usd']:.4f}",
    ]
    for name, row in est["stages"].items():
        tokens = row.get("embedding_tokens", row["prompt_tokens"] + row["completion_tokens"])
        lines.append(f"    {name:<10} calls ~{row['calls']:,}  tokens ~{tokens:,}  ${row['usd']:.4f}")
    if summary["unpriced_models"]:
        lines.append(f"  no price for {', '.join(summary['unpriced_models'])} (cost.prices): counted as $0")
    lines.append(f"  not estimated: {', '.join(est['not_estimated'])}")
    return "\n".join(lines)
