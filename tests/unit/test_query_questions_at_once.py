"""`hxd2 query --questions` answers `--concurrency` questions at once and prints the answers in the file's order,
the same answers as one question after another."""

from __future__ import annotations

import json
import threading

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

    answering_threads: set[str] = set()
    answer = QueryFlow.answer

    def recorded(self, *args, **kwargs):
        answering_threads.add(threading.current_thread().name)
        return answer(self, *args, **kwargs)

    monkeypatch.setattr(QueryFlow, "answer", recorded)
    printed = {}
    for concurrency in ("1", "4"):
        answering_threads.clear()
        argv = ["--index", str(root), "--questions", str(questions), "--json", "--mode", "dual"]
        assert query.main([*argv, "--concurrency", concurrency]) == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
        printed[concurrency] = [(a["answer"], a["references"]) for a in lines]
        print(concurrency, sorted(answering_threads))
        assert len(answering_threads) == (1 if concurrency == "1" else 4), answering_threads
    assert len(printed["1"]) == len(QUESTIONS) and printed["4"] == printed["1"]


@pytest.mark.parametrize("bad", ["0", "-2", "x"])
def test_a_concurrency_below_one_is_refused(tmp_path, capsys, bad):
    assert query.main(["--index", str(tmp_path), "--questions", str(tmp_path / "q.jsonl"), "--concurrency", bad]) == 2
    assert "--concurrency" in capsys.readouterr().err
