"""Tokens, cost and the budget of an indexing run (the ledger every stage charges) and the dry run's estimate."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from hxd2_ray.config import CostConfig, ModelPrice, load_config
from hxd2_ray.llm.metering import TagUsage
from hxd2_ray.stages.cost import PriceBook, StageUsage, UsageLedger, embedding_payload, estimate_run, llm_payload
from hxd2_ray.stages.extract_stage import ExtractAndPersist
from hxd2_ray.stages.stage_run import StageRun

PRICES = CostConfig(
    prices={
        "gpt-x": ModelPrice(input_usd_per_million=2.0, output_usd_per_million=8.0),
        "self-hosted": ModelPrice(gpu_hour_usd=3.6),
        "embedder": ModelPrice(input_usd_per_million=0.1),
    }
)


def test_a_batch_is_charged_to_its_stages_with_tokens_hits_and_gpu_seconds():
    rows = llm_payload(
        {"extract": TagUsage(2, 1000, 200), "glean": TagUsage(2, 1500, 100), "judge": TagUsage()},
        seconds=10.0,
        hits={"extract": 3, "summarize": 1},
        model_id="gpt-x",
        gpus_per_actor=2,
    )
    by_stage = {r["stage"]: r for r in rows}
    assert set(by_stage) == {"extraction", "gleaning", "judge", "summary"}
    assert by_stage["extraction"]["calls"] == 2 and by_stage["extraction"]["cache_hits"] == 3
    assert by_stage["summary"]["calls"] == 0 and by_stage["summary"]["cache_hits"] == 1
    assert sum(r["gpu_seconds"] for r in rows) == pytest.approx(20.0)
    assert by_stage["extraction"]["gpu_seconds"] == pytest.approx(20.0 * 1200 / 2800)


def test_prices_per_token_and_per_gpu_hour():
    book = PriceBook(dict(PRICES.prices))
    assert book.usd(StageUsage("gpt-x", prompt_tokens=1_000_000, completion_tokens=500_000)) == pytest.approx(6.0)
    assert book.usd(StageUsage("self-hosted", prompt_tokens=10**9, gpu_seconds=1800)) == pytest.approx(1.8)
    assert book.usd(StageUsage("embedder", embedding_tokens=2_000_000)) == pytest.approx(0.2)
    assert book.usd(StageUsage("unknown", prompt_tokens=10**9)) == 0.0


def test_the_ledger_totals_per_stage_and_closes_at_the_token_budget():
    ledger = UsageLedger(PRICES, budget_tokens=5000)
    ledger.charge(llm_payload({"extract": TagUsage(4, 3000, 1000)}, 1.0, {}, "gpt-x", 0))
    assert ledger.exhausted() == ""
    ledger.charge(llm_payload({"glean": TagUsage(1, 900, 100)}, 1.0, {"extract": 2}, "gpt-x", 0))
    assert "token budget reached: 5,000 of 5,000" in ledger.exhausted()
    ledger.charge(embedding_payload("embedder", texts=10, tokens=1_000_000, seconds=1.0, gpus_per_actor=0))
    ledger.note_skipped(2)
    totals = ledger.totals()
    assert list(totals["stages"]) == ["extraction", "gleaning", "embedding"]
    assert totals["llm_calls"] == 5 and totals["llm_cache_hits"] == 2
    assert totals["prompt_tokens"] == 3900 and totals["completion_tokens"] == 1100
    assert totals["embedding_tokens"] == 1_000_000 and totals["stages"]["embedding"]["texts"] == 10
    assert totals["usd"] == pytest.approx((3900 * 2 + 1100 * 8) / 1e6 + 0.1)
    assert totals["budget"]["batches_not_started"] == 2 and totals["unpriced_models"] == []


def test_the_ledger_closes_at_the_cost_budget_and_rejects_nonsense():
    ledger = UsageLedger(PRICES, budget_usd=0.02)  # $0.012 per charge below
    ledger.charge(llm_payload({"extract": TagUsage(1, 4000, 500)}, 1.0, {}, "gpt-x", 0))
    assert ledger.exhausted() == ""
    ledger.charge(llm_payload({"extract": TagUsage(1, 4000, 500)}, 1.0, {}, "gpt-x", 0))
    assert "cost budget reached" in ledger.exhausted()
    with pytest.raises(ValueError, match="positive"):
        UsageLedger(PRICES, budget_tokens=0)


def test_a_stage_starts_no_batch_once_the_budget_is_spent_and_writes_nothing(tmp_path):
    cfg = load_config(None, ["ray.ner_batch_size=2"])
    ledger = UsageLedger(CostConfig(), budget_tokens=1)
    run = StageRun(ledger=ledger)
    stage = ExtractAndPersist(cfg, pafs.LocalFileSystem(), str(tmp_path), run=run)
    batch = pa.table(
        {
            "id": ["a", "b"],
            "doc_id": ["d", "d"],
            "order": [0, 1],
            "start": [0, 10],
            "text": ["Marie Curie lived in Paris.", "Pierre Curie met Marie Curie."],
            "header_path": ["", ""],
            "language": ["en", "en"],
        }
    )
    first = stage(batch).to_pylist()[0]
    assert first["skipped"] == 0 and first["rows"] == 2 and first["path"].endswith(first["file"])
    assert ledger.totals()["stages"]["extraction"]["calls"] == 2  # the ledger saw the batch's calls
    second = stage(batch).to_pylist()[0]
    assert second["skipped"] == 2 and second["path"] == "" and ledger.totals()["budget"]["batches_not_started"] == 1
    assert len(list((tmp_path / "extractions").glob("*.parquet"))) == 1


def test_the_estimate_scales_the_sample_and_prices_it():
    ledger = UsageLedger(PRICES)
    ledger.charge(
        llm_payload({"extract": TagUsage(10, 10_000, 2_000), "glean": TagUsage(10, 12_000, 500)}, 5.0, {}, "gpt-x", 0)
    )
    est = estimate_run(
        ledger.totals(),
        sample_chunks=10,
        pending_chunks=1000,
        seconds_per_chunk=0.5,
        actors=2,
        embed_texts=3000,
        embed_tokens=300_000,
        prices=PriceBook(dict(PRICES.prices)),
        llm_model="gpt-x",
        embedding_model="embedder",
        gpus_per_actor=0,
    )
    assert est["llm_calls"] == 2000 and est["llm_tokens"] == 2_450_000
    assert est["extract_seconds"] == pytest.approx(250.0)
    assert est["usd"] == pytest.approx((2_200_000 * 2 + 250_000 * 8) / 1e6 + 0.03)
    assert est["not_estimated"]
