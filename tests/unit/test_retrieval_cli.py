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
    path.write_text(
        yaml.safe_dump(
            {
                "llm": {"backend": "scripted"},
                "embedding": {"backend": "hashing", "dim": DIM},
                "retrieval": {"similarity_threshold": 0.2},
            }
        )
    )
    return str(path)


QUESTION = "Brian Kobilka won the Nobel Prize and works at Stanford."


def test_json_with_trace(tiny, config_file, capsys):
    rc = query.main(
        ["--index", str(tiny.root), "--config", config_file, QUESTION, "--json", "--trace", "--mode", "dual"]
    )
    out = capsys.readouterr().out
    assert rc == 0
    data = json.loads(out)
    assert data["path"] == "dual_level" and data["mode"] == "dual" and data["fallback_reason"] is None
    # the built-in scripted mode answers with the question and the context's first entities
    assert data["answer"].startswith(f"Scripted answer to: {QUESTION}")
    assert data["references"][0]["source_id"] == "brian_kobilka.txt"
    trace = data["trace"]
    assert trace["path"] == "dual_level" and trace["path_reason"] == "mode dual: dual-level retrieval only"
    retrieval = trace["retrieval"]
    assert retrieval["keywords"]["low_level"] == ["Brian Kobilka", "Nobel Prize", "Stanford"]
    assert retrieval["entities"][0]["name"] == "Brian Kobilka"
    assert set(retrieval["tokens"]) >= {"instructions", "question", "entities", "relations", "chunks", "total"}


def test_plain_stream_and_trace(tiny, config_file, capsys):
    rc = query.main(
        ["--index", str(tiny.root), "--config", config_file, "--stream", "--trace", "--mode", "dual", QUESTION]
    )
    captured = capsys.readouterr()
    assert rc == 0
    assert captured.out.startswith("Scripted answer to:")
    assert "References:" in captured.out and "brian_kobilka.txt" in captured.out
    assert "Trace (en)" in captured.out and "tokens  instructions" in captured.out
    assert "path: dual_level (mode dual: dual-level retrieval only)" in captured.err  # the path goes to stderr


def test_auto_mode_reports_the_path_taken_and_its_trace(tiny, config_file, capsys):
    rc = query.main(["--index", str(tiny.root), "--config", config_file, QUESTION, "--json", "--trace"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["answer"].strip()
    # The scripted plan retrieves the question's first name; the verifier says yes: answered by the logic form.
    assert data["mode"] == "auto" and data["path"] == "logic_form", data["trace"]["path_reason"]
    assert data["trace"]["path"] == data["path"] and data["trace"]["path_reason"] == "pre-check verifier said yes"
    steps = data["trace"]["logic"]["evidence"]["steps"]
    assert steps[0]["op"] == "retrieval" and steps[0]["queries"], steps


@pytest.mark.parametrize("mode", ["llm_only", "chunk_vector", "dual_retrieval", "logic", "auto_post"])
def test_every_mode_answers_through_the_cli(tiny, config_file, mode, capsys):
    rc = query.main(["--index", str(tiny.root), "--config", config_file, QUESTION, "--json", "--mode", mode])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["mode"] == mode
    expected = {
        "llm_only": "llm_only",
        "chunk_vector": "chunk_vector",
        "dual_retrieval": "dual_retrieval",
        "logic": "logic_form",
        "auto_post": "logic_form",
    }[mode]
    assert data["path"] == expected
    if mode in ("chunk_vector", "dual_retrieval"):
        assert data["answer"] == "" and data["references"][0]["source_id"] == "brian_kobilka.txt"
    elif mode == "llm_only":
        assert data["answer"] and data["references"] == []
    else:
        assert data["answer"].startswith("Scripted logic-form answer")


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
