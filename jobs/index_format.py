"""What ``hxd2 index`` prints: a build's, update's or delete's summary, a stopped run's, a dry run's estimate."""

from __future__ import annotations

from typing import Any


def _run_line(summary: dict[str, Any]) -> str:
    run = summary.get("run") or {}
    if not run:
        return "  this run: -"
    cache = f"  LLM cache hits {run['llm_cache_hits']:,}" if (summary.get("llm_cache") or {}).get("enabled") else ""
    prompt, cached = run["prompt_tokens"], run.get("prefix_cached_tokens", 0)
    share = f" ({cached:,} prefix-cached, {100 * cached / prompt:.1f}%)" if prompt and cached else ""
    return (
        f"  this run: LLM calls {run['llm_calls']:,}, prompt tokens {prompt:,}{share}, completion tokens "
        f"{run['completion_tokens']:,}, embedding tokens {run['embedding_tokens']:,}, ${run['usd']:.4f}{cache}"
    )


def format_summary(summary: dict[str, Any]) -> str:
    if summary.get("status") == "stopped":
        return "\n".join(
            [
                f"stopped: {summary['reason']}",
                f"  index at {summary['output']}: {summary['index']}",
                f"  done: {summary['done']}",
                f"  left: {summary['left']}",
                _run_line(summary),
                f"  to continue: {summary['resume']}",
            ]
        )
    if summary.get("status") == "estimate":
        return format_estimate(summary)
    if summary.get("status") == "unchanged":
        return "\n".join(
            [
                f"index at {summary['output']} unchanged (generation {summary['generation']}): {summary['reason']}",
                _run_line(summary),
            ]
        )
    change = summary.get("change") or {}
    what = (
        f"generation {summary['generation']} ({summary.get('kind', 'build')}"
        + (
            f": +{change.get('added', 0)} ~{change.get('updated', 0)} -{change.get('deleted', 0)} documents"
            if summary.get("kind") in ("update", "delete", "sync")
            else ""
        )
        + ")"
    )
    lines = [
        f"index written to {summary['output']}, {what} (fingerprint {summary['fingerprint']})",
        *(f"  built with {name}, not a model" for name in summary.get("stand_ins", [])),
        f"  documents {summary['documents']:>10,}   chunks {summary['chunks']:>10,}",
        f"  entities  {summary['entities']:>10,}   relations {summary['relations']:>7,}",
        f"  quarantined files {summary['quarantined_files']:,} {summary['quarantine_reasons'] or ''}",
        f"  corpus extraction: LLM calls {summary['llm_calls']:,}  prompt tokens {summary['prompt_tokens']:,}  "
        f"completion tokens {summary['completion_tokens']:,}",
        _run_line(summary),
        f"  malformed records skipped {summary['malformed_records']:,}  failed chunks {summary['failed_chunks']:,}",
        f"  ungrounded (dropped) entities {summary.get('ungrounded_entities', 0):,}  relations "
        f"{summary.get('ungrounded_relations', 0):,}",
        "  seconds per stage: " + ", ".join(f"{k} {v:.1f}" for k, v in summary["seconds_per_stage"].items()),
        f"  synonym edges {summary.get('synonym_edges', 0):,} {summary.get('synonyms') or ''}",
        f"  title mentions {summary.get('title_mentions', 0):,} (chunk, named document) pairs",
    ]
    refusal = summary.get("refusal_calibration") or {}
    if "threshold" in refusal:
        lines.append(
            f"  refusal threshold {refusal['threshold']:.4f} (rule {refusal['rule']}, F1 {refusal['f1']:.3f}; "
            f"with names F1 {refusal['with_names']['f1']:.3f})"
        )
        if refusal.get("notice"):
            lines.append(f"  {refusal['notice']}")
    lines += _missing_lines(summary.get("missing_from_input") or [], summary.get("output", ""))
    return "\n".join(lines)


def _missing_lines(missing: list[str], output: str) -> list[str]:
    """An update leaves the documents whose files are gone from the input: say which, and how to remove them."""
    if not missing:
        return []
    shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    return [
        f"  {len(missing):,} indexed files are not in this input and stay in the index: {shown}",
        f"  to remove them: rerun with --sync (the index becomes exactly the input), or hxd2 index delete --output "
        f"{output} --source PATH",
    ]


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
