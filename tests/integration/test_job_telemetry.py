"""The index and evaluation jobs' own counters, read back from the session Ray's Prometheus endpoint.

A small index (two sample documents, scripted LLM, hashing embedder) and an evaluation of three questions run
in this process on the session's Ray; the metrics the jobs export (``jobs/job_metrics.py``) must equal the
jobs' own summaries and traces, under the ``run`` label of each command's output.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from pathlib import Path

import pytest

from hxd2_ray.stages.eval_traces import load_traces
from jobs import evaluate as eval_job
from jobs import index as index_job
from jobs.job_metrics import metric_value, parse_prometheus
from tests.stand_ins import STAND_INS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "hxd2_ray" / "sample_data"
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


def _scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return parse_prometheus(resp.read().decode("utf-8"))


def _wait_for(url: str, ready, timeout_s: float = 90.0) -> dict:
    """Ray's metrics agent exports what workers report every few seconds: poll until ``ready(samples)``."""
    deadline = time.monotonic() + timeout_s
    samples: dict = {}
    while time.monotonic() < deadline:
        samples = _scrape(url)
        if ready(samples):
            return samples
        time.sleep(1.0)
    return samples


def test_index_and_eval_metrics_equal_their_summaries(ray_metrics_url, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("thomas_sudhof.md", "david_eagleman.txt"):
        shutil.copy(SAMPLE / "corpus" / name, corpus / name)
    index = tmp_path / "index"
    assert index_job.main(["--input", str(corpus), "--output", str(index), *FAST, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    run = str(index)

    def m(name: str, **labels) -> float:
        return metric_value(samples, name, run=run, **labels)

    samples = _wait_for(
        ray_metrics_url,
        lambda s: (
            metric_value(s, "ray_hxd2_texts_embedded_total", run=run) >= summary["embedded_texts"]
            and metric_value(s, "ray_hxd2_stage_duration_seconds_count", run=run, stage="write") >= 1
        ),
    )
    assert m("ray_hxd2_files_ingested_total", job="index", stage="ingest") == 2
    assert m("ray_hxd2_chunks_processed_total", stage="extract") == summary["chunks"]
    assert m("ray_hxd2_llm_calls_total", stage="extract") == summary["llm_calls"]
    assert m("ray_hxd2_llm_tokens_total", stage="extract", kind="prompt") == summary["prompt_tokens"]
    assert m("ray_hxd2_llm_tokens_total", stage="extract", kind="completion") == summary["completion_tokens"]
    assert m("ray_hxd2_malformed_records_total") == summary["malformed_records"]
    assert m("ray_hxd2_failures_total") == summary["failed_chunks"] == 0
    # a text shared by several vectors (a name that is also a description) is embedded once
    assert m("ray_hxd2_texts_embedded_total", stage="embed") == summary["embedded_texts"]
    assert summary["embedded_texts"] <= sum(summary["vectors"].values())
    for stage in ("ingest", "extract", "merge", "embed", "write"):
        assert m("ray_hxd2_stage_duration_seconds_count", stage=stage) == 1, stage
        assert m("ray_hxd2_stage_duration_seconds_sum", stage=stage) > 0, stage
    # what goes in the log: tests/integration/test_cli_output.py
    assert len(list((index / "_logs").glob("index-*.log"))) == 1

    evaluation = tmp_path / "eval"
    assert (
        eval_job.main(
            [
                "run",
                "--benchmark",
                "generic",
                "--questions",
                str(SAMPLE / "questions.jsonl"),
                "--index",
                str(index),
                "--output",
                str(evaluation),
                "--mode",
                "dual",
                "--limit",
                "3",
                *FAST,
                "--json",
            ]
        )
        == 0
    )
    esummary = json.loads(capsys.readouterr().out)
    import pyarrow.fs as pafs

    traces = load_traces(pafs.LocalFileSystem(), str(evaluation), ["dual"])
    run = str(evaluation)
    samples = _wait_for(
        ray_metrics_url,
        lambda s: (
            metric_value(s, "ray_hxd2_questions_answered_total", run=run) >= 3
            and metric_value(s, "ray_hxd2_stage_duration_seconds_count", run=run) >= 1
        ),
    )
    assert m("ray_hxd2_questions_answered_total", job="eval", mode="dual") == esummary["answered_this_run"] == 3
    assert m("ray_hxd2_questions_correct_total", mode="dual") == sum(t["correct"] for t in traces)
    assert m("ray_hxd2_llm_tokens_total", mode="dual", kind="prompt") == sum(t["prompt_tokens"] for t in traces)
    assert m("ray_hxd2_llm_tokens_total", mode="dual", kind="completion") == sum(t["completion_tokens"] for t in traces)
    assert m("ray_hxd2_failures_total", mode="dual") == sum(1 for t in traces if t["error"])
    assert m("ray_hxd2_stage_duration_seconds_count", stage="answer dual", mode="dual") == 1
