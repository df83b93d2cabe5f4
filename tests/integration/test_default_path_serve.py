"""``hxd2 serve`` on the default path (the real default models, the index ``scripts/demo`` built): one answer
streamed over the OpenAI SDK, with the time from "ready" to its first token printed and bounded, then a follow-up
that needs the previous turn.

It measures a latency, so scripts/test runs it in its one-at-a-time part: in CI's two-at-a-time part it shared the
2 cores with the OpenAI-backend tests' vLLM server and measured that neighbour (58 s).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.default_path import QUESTIONS, ROOT, default_path_index
from tests.integration.servers import free_port, kill_session_leftovers, stop_process_group, wait_until_served

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

# The first streamed token after "ready". The target is 10 s on 2 idle cores, met on machines with bf16
# units (warm answers 5-6 s; before the warm-up the first came 59.6 s after ready). On the 2-core AVX2 EPYCs the
# project now runs on, with the fp32 engine and nothing else running, the first token came 16.4 s after ready
# (2026-12-06); the bound leaves that a margin and still fails a start whose one-time costs come after "ready".
FIRST_TOKEN_AFTER_READY_S = 30.0
# Answers streamed one after another before the follow-up (the serving benchmarks' first and tenth:
# HXD2_SERVE_ANSWERS=10).
ANSWERS = int(os.environ.get("HXD2_SERVE_ANSWERS", "1"))


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    return default_path_index(tmp_path_factory)


def test_serve_streams_a_first_answer_soon_after_it_says_ready(index, tmp_path):
    import openai

    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HXD2_API_KEYS": "secret"}
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "serve", "--index", f"sample={index}", "--port", str(port),
             "--num-cpus", "2"],
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        started = time.monotonic()
        wait_until_served(f"http://127.0.0.1:{port}/healthz", proc, log, said="serving sample at ", timeout_s=900)
        ready = time.monotonic()
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="secret", timeout=600)
        firsts = [_first_token_s(client, QUESTIONS[i % len(QUESTIONS)]["question"]) for i in range(ANSWERS)]
        print(
            f"\nhxd2 serve on the default config: ready {ready - started:.1f} s after the start; time to first token "
            "of answers 1.." + str(ANSWERS) + " after ready: " + ", ".join(f"{s:.1f}" for s in firsts) + " s"
        )
        assert firsts[0] < FIRST_TOKEN_AFTER_READY_S
        # A follow-up that needs the previous turn: the small model rewrites it before retrieval (issue 45).
        history = [
            {"role": "user", "content": "Tell me about David Eagleman."},
            {"role": "assistant", "content": "David Eagleman is a neuroscientist at Stanford University."},
        ]
        body = {"question": "Which company did he co-found?", "history": history, "trace": True, "mode": "dual"}
        follow_up = httpx.post(
            f"http://127.0.0.1:{port}/v1/query", json=body, headers={"Authorization": "Bearer secret"}, timeout=600
        ).json()
        conversation = follow_up["trace"]["conversation"]
        print(f"follow-up rewritten by the small model: {conversation} -> references {follow_up['references']}")
        assert conversation["history_turns"] == 2 and conversation["original"] == body["question"]
        assert follow_up["answer"].strip() and follow_up["references"]
    finally:
        stop_process_group(proc)  # the whole group, as Ctrl-C in a terminal signals it
        leftovers = kill_session_leftovers(proc.pid)
    # vLLM's engine core, in a group of its own under a Ray worker, outlived hxd2 serve (4.8 GB) until serve
    # stopped what it left behind (jobs/process_reaper.py).
    assert not leftovers, f"hxd2 serve left processes behind: {leftovers}"


def _first_token_s(client, question: str) -> float:
    """Seconds from the start of this request to its first streamed token (the first answer's request starts at
    once after "ready", so its figure is also the time from ready)."""
    asked = time.monotonic()
    stream = client.chat.completions.create(
        model="sample", stream=True, messages=[{"role": "user", "content": question}]
    )
    first = None
    text = ""
    for chunk in stream:
        delta = chunk.choices[0].delta.content if chunk.choices else None
        if delta:
            first = first or time.monotonic()
            text += delta
    assert first is not None and text.strip(), question
    return first - asked
