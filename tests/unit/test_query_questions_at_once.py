"""`hxd2 query --questions` answers `--concurrency` questions at once and prints the answers in the file's order,
the same answers as one question after another."""

from __future__ import annotations

import json
import threading
import time

import pytest

from jobs import query
from tests.unit.retrieval_fixtures import build_tiny_index

QUESTIONS = (
    "Where does Robert Malenka work?",
    "Which prize did Thomas Südhof win?",
    "What does Brian Kobilka study?",
    "Who studies Synaptic Transmission?",
    "Where does Karl Deisseroth work?",
)


def test_questions_at_once_print_the_answers_of_one_at_a_time_in_the_files_order(tmp_path, capsys, monkeypatch):
    root = build_tiny_index(tmp_path / "index").root
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps({"question": q}) + "\n" for q in QUESTIONS), encoding="utf-8")
    from hxd2_ray.retrieval.flow import QueryFlow

    lock = threading.Lock()
    in_flight = [0, 0]  # now, most at once
    answer = QueryFlow.answer

    def recorded(self, *args, **kwargs):
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        try:
            time.sleep(0.2)  # long enough for every worker to hold a question at once
            return answer(self, *args, **kwargs)
        finally:
            with lock:
                in_flight[0] -= 1

    monkeypatch.setattr(QueryFlow, "answer", recorded)
    printed = {}
    for concurrency in ("1", "4"):
        in_flight[1] = 0
        argv = ["--index", str(root), "--questions", str(questions), "--json", "--mode", "dual"]
        assert query.main([*argv, "--concurrency", concurrency]) == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
        printed[concurrency] = [(a["answer"], a["references"]) for a in lines]
        assert in_flight[1] == int(concurrency), (concurrency, in_flight)
    assert len(printed["1"]) == len(QUESTIONS) and printed["4"] == printed["1"]


@pytest.mark.parametrize("bad", ["0", "-2", "x"])
def test_a_concurrency_below_one_is_refused(tmp_path, capsys, bad):
    assert query.main(["--index", str(tmp_path), "--questions", str(tmp_path / "q.jsonl"), "--concurrency", bad]) == 2
    assert "--concurrency" in capsys.readouterr().err
