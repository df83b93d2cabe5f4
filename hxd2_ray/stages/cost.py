"""Tokens, cost and the budget of one indexing run, per stage (extraction, gleaning, judge, summary, embedding).

Every stage actor charges what its batch cost to one :class:`UsageLedger` (the job runs it as a Ray actor, tests
in process): backend calls and tokens by stage (replies served from the LLM cache are counted as hits and cost
nothing), embedding tokens, and the GPU-seconds the actors spent on them. Prices come from the config
(``cost.prices``: per million input / output tokens per model id, or a GPU-hour rate for a self-hosted model).
The ledger is also the budget: before each batch a stage asks :meth:`UsageLedger.exhausted`, and once this run
has spent ``budget_tokens`` LLM tokens or ``budget_usd`` dollars no new batch starts (batches in flight finish, so
a run overshoots by at most the batches the actors hold). Everything finished is on disk; a rerun continues.

:func:`estimate_run` turns what a sample of chunks cost (``hxd2 index --dry-run``) into an estimate for the rest.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from hxd2_ray.config import CostConfig, ModelPrice

LLM_STAGES = ("extraction", "gleaning", "judge", "summary")
STAGES = (*LLM_STAGES, "embedding")
# Request tags (hxd2_ray.extraction.render) -> the stage their tokens are charged to.
STAGE_OF_TAG = {"extract": "extraction", "glean": "gleaning", "judge": "judge", "summarize": "summary"}


@dataclass
class StageUsage:
    model_id: str = ""
    calls: int = 0  # requests the backend answered (retries included)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # of prompt_tokens, those the engine reused from its prefix cache instead of computing
    cache_hits: int = 0  # requests answered from the LLM cache: no call, no tokens
    texts: int = 0  # embedding: texts embedded
    embedding_tokens: int = 0  # embedding: tokens of those texts (the embedder's tokenizer, or an estimate)
    gpu_seconds: float = 0.0  # seconds the actors worked on it x GPUs per actor (for GPU-hour prices)

    def add(self, other: "StageUsage") -> None:
        self.model_id = self.model_id or other.model_id
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_tokens += other.cached_tokens
        self.cache_hits += other.cache_hits
        self.texts += other.texts
        self.embedding_tokens += other.embedding_tokens
        self.gpu_seconds += other.gpu_seconds

    @property
    def llm_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class PriceBook:
    prices: Mapping[str, ModelPrice] = field(default_factory=dict)

    def usd(self, usage: StageUsage) -> float:
        price = self.prices.get(usage.model_id)
        if price is None:
            return 0.0
        tokens_in = usage.prompt_tokens + usage.embedding_tokens
        return (
            tokens_in * price.input_usd_per_million + usage.completion_tokens * price.output_usd_per_million
        ) / 1e6 + usage.gpu_seconds / 3600.0 * price.gpu_hour_usd

    def priced(self, model_id: str) -> bool:
        return model_id in self.prices


def llm_payload(
    by_tag: Mapping[str, Any], seconds: float, hits: Mapping[str, int], model_id: str, gpus_per_actor: float
) -> list[dict[str, Any]]:
    """Ledger rows (one per stage) from a batch's metered calls (``MeteredLLM.take``: usage by tag, seconds in
    the backend) and its cache hits by tag.

    The batch's seconds are shared among its stages in proportion to their tokens (one batched call mixes rounds
    of several chunks, so no finer split exists)."""
    stages: dict[str, StageUsage] = {}
    for tag, tu in by_tag.items():
        rec = stages.setdefault(STAGE_OF_TAG.get(tag, tag or "other"), StageUsage(model_id=model_id))
        rec.calls += tu.calls
        rec.prompt_tokens += tu.prompt_tokens
        rec.completion_tokens += tu.completion_tokens
        rec.cached_tokens += tu.cached_tokens
    for tag, n in hits.items():
        stages.setdefault(STAGE_OF_TAG.get(tag, tag or "other"), StageUsage(model_id=model_id)).cache_hits += n
    total = sum(r.llm_tokens for r in stages.values())
    rows = []
    for name in sorted(stages):
        rec = stages[name]
        share = rec.llm_tokens / total if total else 1.0 / len(stages)
        rec.gpu_seconds = seconds * gpus_per_actor * share
        rows.append({"stage": name, **asdict(rec)})
    return rows


def embedding_payload(
    model_id: str, texts: int, tokens: int, seconds: float, gpus_per_actor: float
) -> list[dict[str, Any]]:
    """The ledger row of one embedded batch."""
    return [
        {
            "stage": "embedding",
            **asdict(
                StageUsage(
                    model_id=model_id, texts=texts, embedding_tokens=tokens, gpu_seconds=seconds * gpus_per_actor
                )
            ),
        }
    ]


class UsageLedger:
    """What this run spent, per stage, and whether its budget is used up.

    Plain Python: the job wraps it in a Ray actor that every stage actor charges; tests use it directly. Payloads
    are lists of dicts with a ``stage`` key and :class:`StageUsage` fields.
    """

    def __init__(
        self, cost: CostConfig | None = None, budget_tokens: int | None = None, budget_usd: float | None = None
    ) -> None:
        if budget_tokens is not None and budget_tokens <= 0:
            raise ValueError(f"budget_tokens must be positive, got {budget_tokens}")
        if budget_usd is not None and budget_usd <= 0:
            raise ValueError(f"budget_usd must be positive, got {budget_usd}")
        self.prices = PriceBook(dict((cost or CostConfig()).prices))
        self.budget_tokens = budget_tokens
        self.budget_usd = budget_usd
        self.stages: dict[str, StageUsage] = {}
        self.skipped_batches = 0

    def charge(self, payload: list[dict[str, Any]]) -> None:
        for row in payload:
            row = dict(row)
            stage = str(row.pop("stage"))
            self.stages.setdefault(stage, StageUsage()).add(StageUsage(**row))

    def note_skipped(self, batches: int = 1) -> None:
        self.skipped_batches += batches

    def llm_tokens(self) -> int:
        return sum(u.llm_tokens for s, u in self.stages.items() if s in LLM_STAGES)

    def usd(self) -> float:
        return sum(self.prices.usd(u) for u in self.stages.values())

    def exhausted(self) -> str:
        """Why no new batch may start ("" while the budget allows more)."""
        if self.budget_tokens is not None and self.llm_tokens() >= self.budget_tokens:
            return f"token budget reached: {self.llm_tokens():,} of {self.budget_tokens:,} LLM tokens spent"
        if self.budget_usd is not None and self.usd() >= self.budget_usd:
            return f"cost budget reached: ${self.usd():.4f} of ${self.budget_usd:.4f} spent"
        return ""

    def totals(self) -> dict[str, Any]:
        """The run's usage for the summary: per stage and in total, with cost and the budget's state."""
        stages = {}
        for name in sorted(self.stages, key=lambda s: (STAGES.index(s) if s in STAGES else len(STAGES), s)):
            u = self.stages[name]
            row: dict[str, Any] = {
                "model": u.model_id,
                "calls": u.calls,
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "prefix_cached_tokens": u.cached_tokens,
                "cache_hits": u.cache_hits,
                "gpu_seconds": round(u.gpu_seconds, 3),
                "usd": round(self.prices.usd(u), 6),
            }
            if name == "embedding":
                row.update(texts=u.texts, embedding_tokens=u.embedding_tokens)
            stages[name] = row
        llm = [self.stages[s] for s in LLM_STAGES if s in self.stages]
        return {
            "stages": stages,
            "llm_calls": sum(u.calls for u in llm),
            "llm_cache_hits": sum(u.cache_hits for u in llm),
            "llm_cache_misses": sum(u.calls for u in llm),
            "prompt_tokens": sum(u.prompt_tokens for u in llm),
            "completion_tokens": sum(u.completion_tokens for u in llm),
            # The engine's own count of prompt tokens it served from its prefix cache (0 where a backend reports
            # none); computed tokens = prompt - prefix-cached + completion.
            "prefix_cached_tokens": sum(u.cached_tokens for u in llm),
            "embedding_tokens": sum(u.embedding_tokens for u in self.stages.values()),
            "usd": round(self.usd(), 6),
            "unpriced_models": sorted(
                {u.model_id for u in self.stages.values() if u.model_id and not self.prices.priced(u.model_id)}
            ),
            "budget": {
                "tokens": self.budget_tokens,
                "usd": self.budget_usd,
                "reached": self.exhausted(),
                "batches_not_started": self.skipped_batches,
            },
        }


def estimate_run(
    sample: Mapping[str, Any],
    sample_chunks: int,
    pending_chunks: int,
    *,
    seconds_per_chunk: float,
    actors: int,
    embed_texts: int,
    embed_tokens: int,
    prices: PriceBook,
    llm_model: str,
    embedding_model: str,
    gpus_per_actor: float,
) -> dict[str, Any]:
    """Scale what ``sample_chunks`` chunks cost (``sample``: :meth:`UsageLedger.totals`) to ``pending_chunks``.

    Extraction, gleaning and judge scale with the chunks; the summaries of long merged descriptions depend on the
    whole corpus and are not estimated (a run reports them); embedding is estimated from the texts to embed.
    Time: the sample's seconds per chunk in an actor (start-up excluded) over ``actors`` actors."""
    factor = pending_chunks / sample_chunks if sample_chunks else 0.0
    stages: dict[str, Any] = {}
    for name in ("extraction", "gleaning", "judge"):
        row = sample.get("stages", {}).get(name)
        if not row:
            continue
        est = StageUsage(
            model_id=llm_model,
            calls=round(row["calls"] * factor),
            prompt_tokens=round(row["prompt_tokens"] * factor),
            completion_tokens=round(row["completion_tokens"] * factor),
        )
        stages[name] = est
    seconds = seconds_per_chunk * pending_chunks / max(1, actors)
    total_tokens = sum(u.llm_tokens for u in stages.values())
    for u in stages.values():
        u.gpu_seconds = seconds * gpus_per_actor * actors * (u.llm_tokens / total_tokens if total_tokens else 0)
    stages["embedding"] = StageUsage(model_id=embedding_model, texts=embed_texts, embedding_tokens=embed_tokens)
    out_stages = {
        name: {
            "calls": u.calls,
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            **({"texts": u.texts, "embedding_tokens": u.embedding_tokens} if name == "embedding" else {}),
            "usd": round(prices.usd(u), 6),
        }
        for name, u in stages.items()
    }
    return {
        "sample_chunks": sample_chunks,
        "chunks_to_extract": pending_chunks,
        "stages": out_stages,
        "llm_calls": sum(u.calls for n, u in stages.items() if n != "embedding"),
        "llm_tokens": total_tokens,
        "extract_seconds": round(seconds, 1),
        "usd": round(sum(prices.usd(u) for u in stages.values()), 6),
        "not_estimated": ["summary (depends on the whole corpus; reported by the run)"],
    }
