"""A lone surrogate in a questions file (or a question) gets a clear answer, never a traceback.

Issue 17, item 12: JSON may spell a lone surrogate (``"\\ud800"``), which Python decodes into a str that no
encoder accepts; `hxd2 query --questions` and `hxd2 eval run --questions` failed on it with tracebacks (or,
for eval, an encoder message after Ray had started).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jobs import query

BAD = "Who is \ud800 here?"


def _jsonl(path: Path, rows: list[dict]) -> Path:
    # json.dumps escapes the surrogate as \ud800, exactly what a hostile file holds.
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_query_questions_file_with_a_lone_surrogate(tmp_path, capsys):
    questions = _jsonl(tmp_path / "q.jsonl", [{"question": "Fine?"}, {"question": BAD}])
    assert query.main(["--index", str(tmp_path / "no-index"), "--questions", str(questions)]) == 2
    line = _error_line(capsys.readouterr().err)
    assert "line 2" in line and "surrogate" in line and "U+D800" in line


@pytest.mark.parametrize(
    ("line", "why"),
    [("[1, 2]", "not a JSON object"), ('{"question": 7}', "not text"), ("{", "JSON"), ('{"q": "x"}', "no question")],
)
def test_query_questions_file_with_other_bad_lines(tmp_path, capsys, line, why):
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "Fine?"}\n' + line + "\n", encoding="utf-8")
    assert query.main(["--index", str(tmp_path / "no-index"), "--questions", str(path)]) == 2
    message = _error_line(capsys.readouterr().err)
    assert "line 2" in message and why in message


def test_query_question_argument_that_is_not_valid_unicode(tmp_path, capsys):
    # A non-UTF-8 byte on the command line reaches Python as a lone surrogate (surrogateescape).
    question = os.fsdecode(b"caf\xe9?")
    assert query.main(["--index", str(tmp_path / "no-index"), question]) == 2
    assert "surrogate" in _error_line(capsys.readouterr().err)


def test_eval_loader_skips_the_row_with_its_reason(tmp_path):
    from hxd2_ray.evaluation.datasets import load_generic

    questions = _jsonl(
        tmp_path / "q.jsonl",
        [
            {"id": "q1", "question": BAD, "answers": ["x"]},
            {"id": "q2", "question": "Fine?", "answers": ["y"]},
            {"id": "q3", "question": "Fine too?", "answers": ["z\udfff"]},
        ],
    )
    report = load_generic(None, questions)
    assert [it.id for it in report.items] == ["q2"]
    assert [where for where, _ in report.skipped] == ["q.jsonl:1", "q.jsonl:3"]
    assert all("surrogate" in why for _, why in report.skipped)


def test_eval_run_with_a_lone_surrogate_question_says_so_before_ray_starts(tmp_path, capsys, monkeypatch):
    from jobs import evaluate
    from jobs import index as index_job

    def refuse(cfg):
        raise AssertionError("Ray started")

    monkeypatch.setattr(index_job, "init_ray", refuse)
    questions = _jsonl(tmp_path / "q.jsonl", [{"id": "q1", "question": BAD, "answers": ["x"]}])
    code = evaluate.main(
        [
            "run",
            "--benchmark",
            "generic",
            "--questions",
            str(questions),
            "--mode",
            "llm_only",
            "--output",
            str(tmp_path / "run"),
        ]
    )
    assert code == 2
    line = _error_line(capsys.readouterr().err)
    assert "no questions" in line and "surrogate" in line


def test_calibrate_refusal_question_files_refuse_a_lone_surrogate(tmp_path):
    from jobs.calibrate import read_questions

    path = _jsonl(tmp_path / "good.jsonl", [{"question": "Fine?"}, {"question": BAD}])
    with pytest.raises(ValueError, match=r"good\.jsonl:2: .*lone surrogate \(U\+D800"):
        read_questions(path)
