"""Evaluation runs as library functions (typed request in, summary out) without Ray: the in-process shard runner
over the tiny index, the index's own config when none is given, resume, and the requests' validation."""

from __future__ import annotations

import json

import pyarrow.fs as pafs
import pytest

from hxd2_ray.runs.evaluation import run_evaluation, run_grid
from hxd2_ray.runs.requests import EvalGridRequest, EvalRunRequest
from hxd2_ray.stages.eval_stage import answer_in_process
from hxd2_ray.stages.eval_traces import load_traces
from tests.unit.retrieval_fixtures import build_tiny_index

QUESTIONS = ["Which prize did Thomas Südhof win?", "Where does Robert Malenka work?", "What is Neurexin?"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_index(tmp_path_factory.mktemp("runs") / "index")


@pytest.fixture
def questions(tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"id": f"q{i}", "question": q, "answers": ["Nobel Prize"], "gold_passages": ["thomas_sudhof.md"]}
            )
            + "\n"
            for i, q in enumerate(QUESTIONS)
        ),
        encoding="utf-8",
    )
    return path


def test_a_run_answers_every_mode_once_and_resumes(tiny, questions, tmp_path):
    shards_seen: list[tuple[str, int]] = []

    def runner(job):
        shards_seen.extend((job.mode, row["shard"]) for row in job.rows)
        return answer_in_process(job)

    req = EvalRunRequest(
        benchmark="generic",
        questions=str(questions),
        index=str(tiny.root),
        output=str(tmp_path / "run"),
        modes=("dual", "chunk_vector", "auto"),
        shards=2,
    )
    summary = run_evaluation(req, runner)
    assert sorted(shards_seen) == [(m, s) for m in ("auto", "chunk_vector", "dual") for s in (0, 1)]
    assert summary["answered_this_run"] == 9 and summary["traces"] == {"dual": 3, "chunk_vector": 3, "auto": 3}
    traces = load_traces(pafs.LocalFileSystem(), str(tmp_path / "run"))
    by_mode = {(t["mode"], t["id"]): t for t in traces}
    assert by_mode[("auto", "q0")]["path"] == "logic_form"  # the scripted plan, from the index's own config
    assert by_mode[("dual", "q0")]["path"] == "dual_level"
    assert by_mode[("chunk_vector", "q0")]["evidence_ids"][0] == "thomas_sudhof.md"
    assert summary["per_mode"]["chunk_vector"]["metrics"]["recall@2"] > 0
    # Both refusal rates in every report: this benchmark's questions refused per mode, and the gate's refusals of
    # the held-out off-topic questions (auto runs the gate; dual and chunk_vector have none).
    assert summary["per_mode"]["auto"]["refused"] is not None and summary["per_mode"]["dual"]["refused"] == 0.0
    assert 0.0 <= summary["off_topic_refusals"]["refused"] <= 1.0 and summary["off_topic_refusals"]["n"] >= 30
    report = (tmp_path / "run" / "report.md").read_text(encoding="utf-8")
    assert "## Refusals" in report and "held-out off-topic questions" in report and "no gate in this mode" in report
    # A rerun finds every shard's file and answers nothing.
    shards_seen.clear()
    again = run_evaluation(req, runner)
    assert shards_seen == [] and again["answered_this_run"] == 0
    assert again["shards_skipped"] == {"dual": [0, 1], "chunk_vector": [0, 1], "auto": [0, 1]}
    # Another config in the same folder is refused, naming what differs.
    with pytest.raises(Exception, match="another benchmark, question set, shard count or config"):
        run_evaluation(req.model_copy(update={"overrides": ("retrieval.top_k_chunks=2",)}), runner)


def test_a_grid_runs_cells_through_the_same_function(tiny, questions, tmp_path):
    req = EvalGridRequest(
        benchmark="generic",
        questions=str(questions),
        output=str(tmp_path / "grid"),
        indexes=(f"tiny={tiny.root}",),
        axes=("retrieval.chunk_budget_tokens=50,2000",),
        modes=("llm_only", "dual"),
    )
    out = run_grid(req, answer_in_process)
    assert [c["cell"] for c in out["cells"]] == [
        "llm_only",
        "tiny__chunk_budget_tokens=50",
        "tiny__chunk_budget_tokens=2000",
    ]
    assert {r["mode"] for r in out["rows"]} == {"llm_only", "dual"}
    assert (tmp_path / "grid" / "grid.md").exists()


def test_requests_check_their_values():
    with pytest.raises(ValueError, match="unknown mode.*valid: auto"):
        EvalRunRequest(benchmark="generic", output="x", modes=("fast",))
    with pytest.raises(ValueError):
        EvalRunRequest(benchmark="generic", output="x", workers=0)
    assert EvalRunRequest(benchmark="generic", output="x", modes=()).modes == ("auto",)
    assert EvalRunRequest(benchmark="generic", output="x", modes=("dual", "dual")).modes == ("dual",)
