"""``hxd2 query`` with the scripted LLM and hashing embedder: output shapes and exit codes."""

from __future__ import annotations

import json

import pytest
import yaml

from jobs import cli, query
from tests.unit.retrieval_fixtures import DIM, build_tiny_index


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_index(tmp_path_factory.mktemp("cli") / "index")


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "scripted.yaml"
    path.write_text(yaml.safe_dump({
        "llm": {"backend": "scripted"},
        "embedding": {"backend": "hashing", "dim": DIM},
        "retrieval": {"similarity_threshold": 0.2},
    }))
    return str(path)


QUESTION = "Brian Kobilka won the Nobel Prize and works at Stanford."


def test_json_with_trace(tiny, config_file, capsys):
    rc = query.main(["--index", str(tiny.root), "--config", config_file, QUESTION, "--json", "--trace",
                     "--mode", "dual"])
    out = capsys.readouterr().out
    assert rc == 0
    data = json.loads(out)
    assert data["path"] == "dual_level"
    assert data["answer"].startswith("scripted echo")  # the built-in scripted mode echoes the prompt
    assert data["references"][0]["source_id"] == "brian_kobilka.txt"
    trace = data["trace"]
    assert trace["keywords"]["parsed"] is False  # the echo is no JSON: question channel only
    assert trace["entities"] and trace["entities"][0]["hits"][0]["channel"].startswith("question:")
    assert set(trace["tokens"]) >= {"instructions", "question", "entities", "relations", "chunks", "total"}


def test_plain_stream_and_trace(tiny, config_file, capsys):
    rc = query.main(["--index", str(tiny.root), "--config", config_file, "--stream", "--trace", "--mode", "dual",
                     QUESTION])
    captured = capsys.readouterr()
    assert rc == 0
    assert captured.out.startswith("scripted echo")
    assert "References:" in captured.out and "brian_kobilka.txt" in captured.out
    assert "Trace (en)" in captured.out and "tokens  instructions" in captured.out
    assert "could not be read" in captured.err  # notices go to stderr


def test_auto_mode_reports_the_path_taken_and_its_trace(tiny, config_file, capsys):
    rc = query.main(["--index", str(tiny.root), "--config", config_file, QUESTION, "--json", "--trace"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["answer"].strip()
    # The scripted echo is no plan, so the logic form fails and the multi-stage pipeline falls back.
    assert data["mode"] == "auto" and data["path"] in {"dual_level", "refused", "direct"}
    assert data["trace"]["path"] == data["path"] and data["trace"]["path_reason"]


def test_greetings_take_the_direct_path(tiny, config_file, capsys):
    rc = query.main(["--index", str(tiny.root), "--config", config_file, "hello", "--json"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["path"] == "direct" and data["answer"].strip() and data["references"] == []


def test_registered_in_the_cli(tiny, config_file, capsys):
    rc = cli.main(["query", "--index", str(tiny.root), "--config", config_file, QUESTION, "--json"])
    assert rc == 0 and "answer" in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("question", ["", "   \t\n"])
def test_empty_question_exits_2(tiny, config_file, question, capsys):
    assert query.main(["--index", str(tiny.root), "--config", config_file, question]) == 2
    assert "question is empty" in capsys.readouterr().err


def test_missing_index_exits_2(tmp_path, config_file, capsys):
    assert query.main(["--index", str(tmp_path / "none"), "--config", config_file, "q?"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_half_written_index_exits_2(tmp_path, config_file, capsys):
    built = build_tiny_index(tmp_path / "half", manifest=False)
    assert query.main(["--index", str(built.root), "--config", config_file, "q?"]) == 2
    assert "missing or half-written" in capsys.readouterr().err


def test_mismatched_embedding_exits_2(tiny, config_file, capsys):
    rc = query.main(["--index", str(tiny.root), "--config", config_file, "--set", "embedding.dim=64", "q?"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "dim 128" in err and "dim 64" in err


def test_bad_config_and_usage_exit_2(tiny, capsys):
    assert query.main(["--index", str(tiny.root), "--set", "retrieval.nope=1", "q?"]) == 2
    assert "unknown key" in capsys.readouterr().err
    assert query.main(["q?"]) == 2  # --index is required
