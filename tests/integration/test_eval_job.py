"""The evaluation job end to end on Ray: a tiny HotpotQA index (scripted LLM + hashing embedder), a grid of
two modes answered by two actors, exact metrics, resumable shards, failure recording and CLI errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hxd2_ray.evaluation.datasets import Prediction, get_benchmark, load_corpus_hotpotqa, write_corpus_jsonl
from hxd2_ray.stages.eval_traces import load_traces
from jobs import evaluate as eval_job
from jobs import index as index_job
from tests.stand_ins import STAND_INS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HOTPOT = ROOT / "tests" / "data" / "eval" / "hotpotqa"
FAST = [
    *STAND_INS,
    "--set",
    "ray.num_cpus=2",
    "--set",
    "ray.ner_batch_size=4",
    "--set",
    "ray.embed_batch_size=64",
    "--set",
    "embedding.dim=64",
]
DATA = [
    "--benchmark",
    "hotpotqa",
    "--questions",
    str(HOTPOT / "questions.json"),
    "--corpus",
    str(HOTPOT / "corpus.json"),
]


@pytest.fixture(scope="module")
def hotpot_index(tmp_path_factory, ray_local) -> Path:
    base = tmp_path_factory.mktemp("eval_index")
    corpus = base / "corpus"
    n = write_corpus_jsonl(load_corpus_hotpotqa(HOTPOT / "corpus.json"), corpus / "passages.jsonl")
    assert n == 10
    out = base / "index"
    assert index_job.main(["--input", str(corpus), "--output", str(out), *FAST, "--json"]) == 0
    return out


def _run(capsys, *args: str) -> tuple[int, dict | None, str]:
    code = eval_job.main([*args, "--json"])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else None), out.err


def _traces(out: Path, modes: list[str]) -> list[dict]:
    import pyarrow.fs as pafs

    return load_traces(pafs.LocalFileSystem(), str(out), modes)


def _stable(trace: dict) -> dict:
    return {k: v for k, v in trace.items() if k != "latency_s"}


def test_grid_exact_metrics_and_resume(hotpot_index, tmp_path, capsys):
    out = tmp_path / "run"
    args = [
        "run",
        *DATA,
        "--index",
        str(hotpot_index),
        "--output",
        str(out),
        "--mode",
        "dual",
        "--mode",
        "auto",
        "--workers",
        "2",
        "--shards",
        "3",
        *FAST,
    ]
    code, summary, err = _run(capsys, *args)
    assert code == 0, err
    assert summary["questions"] == 5 and summary["shards"] == 3
    assert summary["shards_run"] == {"dual": [0, 1, 2], "auto": [0, 1, 2]}
    assert summary["traces"] == {"dual": 5, "auto": 5}
    assert summary["answered_this_run"] == 10 and summary["questions_per_s"] > 0
    for name in ("report.md", "report.json", "summary.json", "run.json", "score_by_mode.png", "latency.png"):
        assert (out / name).is_file(), name
    assert len(list((out / "shards" / "dual").glob("shard-*.parquet"))) == 3

    # Metrics equal the mean of score_item over the traces' own answers and evidence, exactly.
    spec = get_benchmark("hotpotqa")
    items = {it.id: it for it in spec.load(questions=HOTPOT / "questions.json", corpus=HOTPOT / "corpus.json")}
    traces = _traces(out, ["dual", "auto"])
    assert [t["mode"] for t in traces] == ["dual"] * 5 + ["auto"] * 5
    assert all(t["path_reason"] for t in traces if t["mode"] == "auto")  # why each answer took its path
    assert [t["id"] for t in traces[:5]] == list(items)
    report = json.loads((out / "report.json").read_text())
    for mode in ("dual", "auto"):
        rows = [t for t in traces if t["mode"] == mode]
        scored = [
            spec.score(items[t["id"]], Prediction(t["answer"], tuple(t["evidence_ids"]), error=t["error"]))
            for t in rows
        ]
        assert scored == [t["scores"] for t in rows]
        for metric in spec.metrics:
            expected = sum(s[metric] for s in scored) / len(scored)
            assert report["modes"][mode]["metrics"][metric] == expected, (mode, metric)
            assert summary["per_mode"][mode]["metrics"][metric] == expected
        assert report["modes"][mode]["n"] == 5 and report["modes"][mode]["errors"] == 0
        assert all(t["prompt_tokens"] > 0 for t in rows)
    # dual-level answers cite the corpus passages they drew on
    assert any(t["evidence_ids"] for t in traces if t["mode"] == "dual")

    # Delete one shard: the rerun answers only that one, and the traces come out the same.
    (out / "shards" / "dual" / "shard-0001.parquet").unlink()
    code, again, err = _run(capsys, *args)
    assert code == 0, err
    assert again["shards_run"] == {"dual": [1], "auto": []}
    assert again["shards_skipped"] == {"dual": [0, 2], "auto": [0, 1, 2]}
    assert again["answered_this_run"] == 2
    assert [_stable(t) for t in _traces(out, ["dual", "auto"])] == [_stable(t) for t in traces]
    assert again["per_mode"] == summary["per_mode"] | {
        m: {**summary["per_mode"][m], "latency_s": again["per_mode"][m]["latency_s"]} for m in ("dual", "auto")
    }

    # report and compare subcommands
    (out / "report.md").unlink()
    assert eval_job.main(["report", str(out)]) == 0
    assert (out / "report.md").is_file()
    capsys.readouterr()
    assert eval_job.main(["compare", str(out), str(out), "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["summary"]["paired"] == 10 and cmp["rows"] == []


def test_llm_failure_is_recorded_not_fatal(hotpot_index, tmp_path, capsys):
    out = tmp_path / "fail"
    code, summary, err = _run(
        capsys,
        "run",
        *DATA,
        "--index",
        str(hotpot_index),
        "--output",
        str(out),
        "--mode",
        "llm_only",
        "--mode",
        "dual",
        "--workers",
        "2",
        *FAST,
        "--set",
        "llm.fail_when=[Gallu]",
    )
    assert code == 0, err
    traces = _traces(out, ["llm_only", "dual"])
    assert len(traces) == 10
    gallu = [t for t in traces if t["id"] == traces[0]["id"]]
    assert all(t["error"] for t in gallu), gallu
    assert all("scripted failure" in t["error"] for t in gallu)
    llm_only = [t for t in traces if t["mode"] == "llm_only"]
    assert [bool(t["error"]) for t in llm_only] == [True, False, False, False, False]
    assert llm_only[0]["scores"]["f1"] == 0.0
    assert summary["per_mode"]["llm_only"]["errors"] == 1
    # Resuming into the same output with another config would mix answers: refused.
    code = eval_job.main(
        ["run", *DATA, "--index", str(hotpot_index), "--output", str(out), "--mode", "llm_only", *FAST]
    )
    assert code == 2 and "config" in capsys.readouterr().err


def _exact_chunk_ranking(index: Path, question: str, dim: int = 64) -> list[str]:
    """Source ids of the index's chunks by exact cosine with the question (hashing embedder), best first."""
    import numpy as np
    import pyarrow.parquet as pq

    from hxd2_ray.embedding.hashing import HashingEmbedder

    chunks = pq.read_table(index / "_staging" / "chunks").to_pylist()
    docs = {d["id"]: d["source_id"] for d in pq.read_table(index / "_staging" / "documents").to_pylist()}
    emb = HashingEmbedder(dim=dim)
    scores = emb.embed([c["text"] for c in chunks]) @ emb.embed([question])[0]
    order = np.argsort(-scores, kind="stable")
    return list(dict.fromkeys(docs[chunks[i]["doc_id"]] for i in order))


def test_retrieval_only_modes(hotpot_index, tmp_path, capsys):
    out = tmp_path / "recall"
    code, summary, err = _run(
        capsys,
        "run",
        *DATA,
        "--index",
        str(hotpot_index),
        "--output",
        str(out),
        "--mode",
        "chunk_vector",
        "--mode",
        "dual_retrieval",
        *FAST,
    )
    assert code == 0, err
    spec = get_benchmark("hotpotqa")
    items = {it.id: it for it in spec.load(questions=HOTPOT / "questions.json", corpus=HOTPOT / "corpus.json")}
    traces = _traces(out, ["chunk_vector", "dual_retrieval"])
    assert len(traces) == 10
    for t in traces:
        assert t["answer"] == "" and not t["error"]
        assert t["evidence_ids"] and len(set(t["evidence_ids"])) == len(t["evidence_ids"])
    for t in (t for t in traces if t["mode"] == "chunk_vector"):
        assert t["prompt_tokens"] == t["completion_tokens"] == 0  # no LLM at all
        # The flat index of 10 chunks is exact: the ranking is the cosine ranking computed here.
        assert t["evidence_ids"] == _exact_chunk_ranking(hotpot_index, items[t["id"]].question)
    for t in (t for t in traces if t["mode"] == "dual_retrieval"):
        assert t["path"] == "dual_retrieval"
        assert t["prompt_tokens"] > 0 and t["completion_tokens"] > 0  # the keyword call, and nothing generated
    # recall@k is scored from the evidence order
    for mode in ("chunk_vector", "dual_retrieval"):
        rows = [t for t in traces if t["mode"] == mode]
        expected = sum(
            spec.score(items[t["id"]], Prediction("", tuple(t["evidence_ids"])))["recall@2"] for t in rows
        ) / len(rows)
        assert summary["per_mode"][mode]["metrics"]["recall@2"] == expected


def test_concurrent_questions_match_sequential(hotpot_index, tmp_path, capsys):
    """Questions answered by 4 threads at once: the same traces, in the same order, as one at a time, and a
    failing question's LLM errors stay in its own trace."""
    runs = {}
    for concurrency in (1, 4):
        out = tmp_path / f"c{concurrency}"
        code, summary, err = _run(
            capsys,
            "run",
            *DATA,
            "--index",
            str(hotpot_index),
            "--output",
            str(out),
            "--mode",
            "dual",
            "--mode",
            "auto",
            "--shards",
            "1",
            "--concurrency",
            str(concurrency),
            *FAST,
            "--set",
            "llm.fail_when=[demon Lilu is what]",  # question 0's own words: no chunk holds them
        )
        assert code == 0, err
        runs[concurrency] = _traces(out, ["dual", "auto"])
    assert [_stable(t) for t in runs[4]] == [_stable(t) for t in runs[1]]
    errors = [(t["mode"], bool(t["error"]), t["llm_errors"] > 0) for t in runs[4]]
    assert errors == [(m, i == 0, i == 0) for m in ("dual", "auto") for i in range(5)]


def test_grid_of_index_variants_budgets_and_modes(hotpot_index, tmp_path, capsys):
    """Two labelled index variants x a context-budget axis x two modes: every cell is an ordinary run, the
    table's rows are those runs' own numbers, the axis reaches the answers, and a rerun answers nothing."""
    out = tmp_path / "grid"
    args = [
        "grid",
        *DATA,
        "--index",
        f"a={hotpot_index}",
        "--index",
        f"b={hotpot_index}",
        "--axis",
        "retrieval.chunk_budget_tokens=64,4000",
        "--mode",
        "llm_only",
        "--mode",
        "dual",
        "--output",
        str(out),
        "--shards",
        "1",
        *FAST,
    ]
    code, summary, err = _run(capsys, *args)
    assert code == 0, err
    assert [c["cell"] for c in summary["cells"]] == [
        "llm_only",
        "a__chunk_budget_tokens=64",
        "a__chunk_budget_tokens=4000",
        "b__chunk_budget_tokens=64",
        "b__chunk_budget_tokens=4000",
    ]
    assert all(c["answered_this_run"] == 5 for c in summary["cells"])
    doc = json.loads((out / "grid.json").read_text())
    assert [(r["mode"], r["cell"]) for r in doc["rows"]] == [("llm_only", "llm_only")] + [
        ("dual", c["cell"]) for c in summary["cells"][1:]
    ]
    for row in doc["rows"]:
        own = json.loads((out / "cells" / row["cell"] / "summary.json").read_text())["per_mode"][row["mode"]]
        assert row["metrics"] == own["metrics"] and row["n"] == own["n"] == 5
        assert row["prompt_tokens_mean"] == own["prompt_tokens_mean"]
    dual = {r["cell"]: r for r in doc["rows"] if r["mode"] == "dual"}
    small, large = dual["a__chunk_budget_tokens=64"], dual["a__chunk_budget_tokens=4000"]
    assert small["prompt_tokens_mean"] < large["prompt_tokens_mean"]  # the axis reached the prompts
    assert dual["b__chunk_budget_tokens=64"]["metrics"] == small["metrics"]  # same index, same answers
    ext = json.loads((hotpot_index / "manifest.json").read_text())["config"]["extraction"]
    assert doc["indexes"] == {
        label: f"loop_ner={ext['loop_ner']}, max_gleaning={ext['max_gleaning']}" for label in ("a", "b")
    }
    md = (out / "grid.md").read_text()
    assert "| LLM only |" in md and "| Dual-level | a |" in md and "retrieval.chunk_budget_tokens" in md
    assert (out / "grid.png").read_bytes()[:4] == b"\x89PNG"

    code, again, err = _run(capsys, *args)
    assert code == 0, err
    assert [c["answered_this_run"] for c in again["cells"]] == [0] * 5
    assert again["rows"] == summary["rows"]


def test_grid_checks_every_cell_before_answering(hotpot_index, tmp_path, capsys):
    out = tmp_path / "grid"
    code, _, err = _run(
        capsys,
        "grid",
        *DATA,
        "--index",
        str(hotpot_index),
        "--axis",
        "retrieval.chunk_budget_tokens=64,lots",
        "--mode",
        "dual",
        "--output",
        str(out),
        *FAST,
    )
    assert code == 2 and "chunk_budget_tokens" in err
    code, _, err = _run(
        capsys,
        "grid",
        *DATA,
        "--index",
        str(hotpot_index),
        "--axis",
        "retrieval.no_such=1,2",
        "--mode",
        "dual",
        "--output",
        str(out),
        *FAST,
    )
    assert code == 2 and "no_such" in err and "chunk_budget_tokens" in err  # the valid keys are listed
    code, _, err = _run(
        capsys, "grid", *DATA, "--index", f"gone={tmp_path / 'missing'}", "--mode", "dual", "--output", str(out), *FAST
    )
    assert code == 2 and "index gone" in err
    # the index is 64-d (FAST): the second axis value could not open it, so nothing runs, not even the first cell
    code, _, err = _run(
        capsys,
        "grid",
        *DATA,
        "--index",
        f"a={hotpot_index}",
        "--axis",
        "embedding.dim=64,32",
        "--mode",
        "dual",
        "--output",
        str(out),
        *FAST,
    )
    assert code == 2 and "cell a__dim=32" in err and "dim 64" in err
    code, _, err = _run(capsys, "grid", *DATA, "--mode", "dual", "--output", str(out), *FAST)
    assert code == 2 and "--index" in err
    # nothing was answered or written (the log of the refused commands is all there is)
    assert not out.exists() or [p.name for p in out.iterdir()] == ["_logs"]


def test_cli_errors(hotpot_index, tmp_path, capsys):
    from jobs.cli import main as hxd2

    code = hxd2(["eval", "run", "--benchmark", "nope", "--index", str(hotpot_index), "--output", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "unknown benchmark 'nope'" in err and "hotpotqa" in err and "metaqa-1hop" in err
    code = eval_job.main([*DATA, "--index", str(tmp_path / "missing"), "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "no index at" in err
    code = eval_job.main([*DATA, "--index", str(hotpot_index), "--output", str(tmp_path / "o"), "--mode", "x"])
    assert code == 2 and "unknown mode" in capsys.readouterr().err


@pytest.mark.vllm
@pytest.mark.extended
def test_eval_with_the_real_small_model(hotpot_index, tmp_path, capsys):
    """The small model answers through the whole job; the index's hashing vectors are kept for retrieval."""
    out = tmp_path / "vllm"
    code, summary, err = _run(
        capsys,
        "run",
        *DATA,
        "--config",
        str(ROOT / "configs" / "local.yaml"),
        "--set",
        "embedding={backend: hashing, dim: 64}",
        "--set",
        "ray.num_cpus=2",
        "--set",
        "retrieval.answer_max_tokens=32",
        "--set",
        "retrieval.keyword_max_tokens=48",
        "--index",
        str(hotpot_index),
        "--output",
        str(out),
        "--limit",
        "2",
        "--mode",
        "dual",
        "--workers",
        "1",
        "--concurrency",
        "2",
    )
    assert code == 0, err
    traces = _traces(out, ["dual"])
    assert len(traces) == 2 and summary["traces"] == {"dual": 2}
    assert all(t["answer"].strip() and not t["error"] for t in traces), traces
    assert all(t["completion_tokens"] > 0 for t in traces)
    assert (out / "report.md").is_file()
