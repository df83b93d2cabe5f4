"""Grid planning and the comparison table (no Ray: cells are planned and tables built from summaries)."""

from __future__ import annotations

import json

import pytest

from hxd2_ray.evaluation.grid import (
    Axis,
    GridError,
    IndexVariant,
    describe_extraction,
    fallback_rate,
    grid_rows,
    markdown_grid,
    parse_axis,
    parse_index_variant,
    plan_cells,
    write_grid,
)
from hxd2_ray.evaluation.report import LENIENT_NOTE


def test_parse_axis_and_errors():
    assert parse_axis("retrieval.chunk_budget_tokens=2000, 8000") == Axis(
        "retrieval.chunk_budget_tokens", ("2000", "8000")
    )
    for bad in (
        "retrieval.chunk_budget_tokens",
        "=1,2",
        "chunk_budget_tokens=1,2",
        "retrieval.x=1,,2",
        "retrieval.x=1,1",
    ):
        with pytest.raises(GridError):
            parse_axis(bad)


def test_parse_index_variant():
    assert parse_index_variant("g0=runs/idx") == IndexVariant("g0", "runs/idx")
    assert parse_index_variant("runs/idx_gleaning1/") == IndexVariant("idx_gleaning1", "runs/idx_gleaning1/")
    assert parse_index_variant("s3://bucket/indexes/v2") == IndexVariant("v2", "s3://bucket/indexes/v2")
    assert parse_index_variant("loop2=s3://b/p") == IndexVariant("loop2", "s3://b/p")
    with pytest.raises(GridError, match="letters"):
        parse_index_variant("bad label=x")


def test_plan_cells_product_and_llm_only_once():
    ixs = [IndexVariant("g0", "a"), IndexVariant("g1", "b")]
    axes = [Axis("retrieval.chunk_budget_tokens", ("2000", "8000")), Axis("retrieval.top_k", ("20",))]
    cells = plan_cells(ixs, axes, ["llm_only", "dual", "auto", "dual"])
    assert [c.name for c in cells] == [
        "llm_only",
        "g0__chunk_budget_tokens=2000__top_k=20",
        "g0__chunk_budget_tokens=8000__top_k=20",
        "g1__chunk_budget_tokens=2000__top_k=20",
        "g1__chunk_budget_tokens=8000__top_k=20",
    ]
    assert cells[0].modes == ("llm_only",) and cells[0].index is None and cells[0].overrides == []
    assert cells[1].modes == ("dual", "auto")
    assert cells[4].overrides == ["retrieval.chunk_budget_tokens=8000", "retrieval.top_k=20"]
    assert [c.name for c in plan_cells([], [], ["llm_only"])] == ["llm_only"]


@pytest.mark.parametrize(
    "indexes,axes,modes,match",
    [
        ([], [], ["dual"], "need at least one --index"),
        ([IndexVariant("a", "x"), IndexVariant("a", "y")], [], ["dual"], "labels must differ"),
        ([IndexVariant("a", "x")], [Axis("r.k", ("1",)), Axis("r.k", ("2",))], ["dual"], "given twice"),
        ([IndexVariant("a", "x")], [], [], "at least one --mode"),
    ],
)
def test_plan_cells_rejects(indexes, axes, modes, match):
    with pytest.raises(GridError, match=match):
        plan_cells(indexes, axes, modes)


def test_describe_extraction_and_fallback_rate():
    assert (
        describe_extraction({"extraction": {"max_gleaning": 2, "loop_ner": "base", "language": "en"}})
        == "loop_ner=base, max_gleaning=2"
    )
    assert describe_extraction({}) == ""
    assert fallback_rate("auto", {"n": 8, "paths": {"dual_level": 6, "logic_form": 2}}) == 0.75
    assert fallback_rate("auto_post", {"n": 4, "paths": {"logic_form": 4}}) == 0.0
    assert fallback_rate("dual", {"n": 4, "paths": {"dual_level": 4}}) is None


def _mode(score, n=4, paths=None, p50=1.5, tokens=900.0):
    return {
        "n": n,
        "errors": 0,
        "correct": 0,
        "metrics": {"accuracy": score, "parsed": 1.0},
        "latency_s": {"p50": p50, "p95": p50 * 2, "mean": p50},
        "prompt_tokens_mean": tokens,
        "completion_tokens_mean": 12.0,
        "paths": paths or {},
    }


def test_rows_table_and_files(tmp_path):
    axes = [Axis("retrieval.chunk_budget_tokens", ("2000", "8000"))]
    cells = plan_cells([IndexVariant("g1", "idx")], axes, ["llm_only", "dual", "auto"])
    summaries = {
        "llm_only": {"questions": 4, "per_mode": {"llm_only": _mode(0.25)}},
        cells[1].name: {
            "per_mode": {"dual": _mode(0.5), "auto": _mode(0.75, paths={"dual_level": 3, "logic_form": 1})}
        },
        # cells[2] not run yet: left out of the table rather than failing it
    }
    rows = grid_rows(cells, summaries, {"g1": "loop_ner=base, max_gleaning=1"})
    assert [(r["mode"], r["cell"]) for r in rows] == [
        ("llm_only", "llm_only"),
        ("dual", cells[1].name),
        ("auto", cells[1].name),
    ]
    assert rows[2]["fallback_rate"] == 0.75 and rows[1]["fallback_rate"] is None
    assert rows[1]["settings"] == {"retrieval.chunk_budget_tokens": "2000"} and rows[0]["settings"] == {}

    md = markdown_grid("Grid", rows, ["accuracy"], axes, "accuracy")
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert lines[0].split("|")[1:-1][:4] == [" Method ", " Index ", " Loop-NER ", " retrieval.chunk_budget_tokens "]
    assert "| Multi-stage (pre-check) | g1 | loop_ner=base, max_gleaning=1 | 2000 | **0.750** | 75% |" in md
    assert "| LLM only | – | – | – | 0.250 | – |" in md

    paths = write_grid(
        tmp_path,
        benchmark="b",
        questions=4,
        cells=cells,
        summaries=summaries,
        index_info={"g1": "loop_ner=base, max_gleaning=1"},
        axes=axes,
        metrics=["accuracy", "parsed"],
        primary_metric="accuracy",
    )
    doc = json.loads(paths["json"].read_text())
    assert [r["metrics"]["accuracy"] for r in doc["rows"]] == [0.25, 0.5, 0.75]
    assert doc["axes"] == [{"key": "retrieval.chunk_budget_tokens", "values": ["2000", "8000"]}]
    assert len(doc["cells"]) == 3
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Parsed" not in paths["markdown"].read_text()  # the parse rate is not a score column
    assert "lenient" not in paths["markdown"].read_text().lower()  # no lenient metric, no note about it
    md = markdown_grid("Grid", rows, ["accuracy", "accuracy_lenient"], axes, "accuracy")
    assert md.rstrip().endswith(LENIENT_NOTE.rstrip())  # the dagger in the header is explained
