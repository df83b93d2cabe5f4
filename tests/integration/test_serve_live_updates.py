"""Live updates through Serve: while a query loop runs, ``hxd2 index`` adds a document and ``hxd2 index delete``
removes another from the served index. No request fails, none reads two generations, answers cite the added
document and stop citing the deleted one within the switch time, and pruning (``generations.keep: 1``) never
removes a generation a replica holds. The real index job (scripted LLM, hashing embedder) in its own process,
Serve on the session's local Ray.

``HXD2_LIVE_UPDATE_SECONDS`` (default: the short CI form) keeps the loop going longer after each change, for the
figures in the docs (docs/benchmarks/serving.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.servers import free_port
from tests.stand_ins import STAND_INS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "hxd2_ray" / "sample_data" / "corpus"
KEY = "sk-live-updates-3Xb"
INDEX_SETTINGS = (*STAND_INS, "--set", "ray.num_cpus=2", "--set", "embedding.dim=64", "--set", "generations.keep=1")
CONFIG = {"llm": {"backend": "scripted"}, "embedding": {"backend": "hashing", "dim": 64}}
ADDED, DELETED = "karl_deisseroth.txt", "david_eagleman.txt"
QUESTIONS = ("What did Karl Deisseroth develop at Stanford?", "Which company did David Eagleman co-found?")
SWITCH_GOAL_S = 10.0
HOLD_S = float(os.environ.get("HXD2_LIVE_UPDATE_SECONDS", "6"))


def _hxd2(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env.update({"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, f"hxd2 {' '.join(args)}\n{proc.stderr[-3000:]}"
    return proc


@dataclass
class Answered:
    at: float
    status: int
    generation: str = ""
    trace_generation: str = ""
    sources: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()


@dataclass
class QueryLoop:
    base: str
    answers: list[Answered] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as client:
            i = 0
            while not self.stop.is_set():
                question = QUESTIONS[i % len(QUESTIONS)]
                i += 1
                r = client.post(
                    "/v1/query", json={"question": question, "index": "live", "mode": "dual", "trace": True}
                )
                if r.status_code != 200:
                    self.answers.append(Answered(time.time(), r.status_code))
                    continue
                body = r.json()
                refs = body.get("references") or []
                self.answers.append(
                    Answered(
                        time.time(),
                        200,
                        body.get("generation", ""),
                        (body.get("trace") or {}).get("generation", ""),
                        tuple(ref.get("source_id", "") for ref in refs),
                        tuple(ref.get("source_path", "") for ref in refs),
                    )
                )

    def after(self, moment: float) -> list[Answered]:
        return [a for a in self.answers if a.at >= moment]


def _wait_for(check: Any, timeout_s: float) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def test_answers_follow_updates_and_deletes_without_a_failed_request(ray_local, tmp_path):
    from ray import serve

    from serve.app import build_app

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("thomas_sudhof.md", "brian_kobilka.txt", DELETED):
        shutil.copy(SAMPLE / name, corpus / name)
    index = tmp_path / "index"
    _hxd2("index", "--input", str(corpus), "--output", str(index), *INDEX_SETTINGS)

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port, "request_timeout_s": 60})
    keys = tmp_path / "keys"
    keys.write_text(KEY + "\n")
    small = {"ray_actor_options": {"num_cpus": 0.1}}
    app = build_app(
        {
            "indexes": {"live": str(index)},
            "config_data": CONFIG,
            "api_keys_file": str(keys),
            "generation_poll_s": 0.5,
            "request_deadline_s": 30,
            "mode": "dual",
            "deployment_options": {
                name: small
                for name in ("Ingress", "Retriever", "LLM", "Embedder", "Planner", "PlanExecutor", "Verifier")
            },
        }
    )
    serve.run(app, name="live-updates", route_prefix="/live")
    loop = QueryLoop(f"http://127.0.0.1:{port}/live")
    worker = threading.Thread(target=loop.run, daemon=True)
    worker.start()
    try:
        assert _wait_for(lambda: len(loop.answers) >= 5, 120), loop.answers
        first = loop.answers[0].generation
        assert first == "g000001"

        # An update: one document added; the job publishes g000002 (and prunes g000001 unless it is held).
        shutil.copy(SAMPLE / ADDED, corpus / ADDED)
        _hxd2("index", "--input", str(corpus), "--output", str(index), *INDEX_SETTINGS)
        published = (index / "manifest.json").stat().st_mtime  # the switch, as the readers can see it
        # keep=1, yet the generation the replicas still read was not pruned: they hold leases on it
        assert (index / "generations" / "g000001").is_dir()
        assert _wait_for(lambda: any(a.generation == "g000002" for a in loop.after(published)), 60)
        switch_add = min(a.at for a in loop.after(published) if a.generation == "g000002") - published
        time.sleep(HOLD_S)
        assert any(ADDED in a.sources for a in loop.after(published + switch_add)), "the added document is never cited"

        # A delete: the other document removed; g000003.
        _hxd2("index", "delete", "--output", str(index), "--source", str(corpus / DELETED), "--set", "ray.num_cpus=2")
        deleted = (index / "manifest.json").stat().st_mtime
        assert _wait_for(lambda: any(a.generation == "g000003" for a in loop.after(deleted)), 60)
        switch_delete = min(a.at for a in loop.after(deleted) if a.generation == "g000003") - deleted
        time.sleep(HOLD_S)
    finally:
        loop.stop.set()
        worker.join(timeout=60)
        serve.delete("live-updates")
        serve.shutdown()  # its HTTP options (port) belong to this test: the next module starts Serve anew

    answers = loop.answers
    failed = [a for a in answers if a.status != 200]
    print(
        f"\nlive updates: {len(answers)} answers, {len(failed)} failed; publish -> first answer from the new "
        f"generation: update {switch_add:.2f} s, delete {switch_delete:.2f} s"
    )
    assert failed == []
    # one generation per request, named alike in the response and its trace
    assert all(a.generation and a.generation == a.trace_generation for a in answers)
    assert {a.generation for a in answers} == {"g000001", "g000002", "g000003"}
    # the deleted document is not served once the delete's generation is: never cited from g000003 on
    assert not any(DELETED in a.sources for a in answers if a.generation == "g000003")
    assert any(DELETED in a.sources for a in answers if a.generation != "g000003")  # it was cited before
    assert switch_add < SWITCH_GOAL_S and switch_delete < SWITCH_GOAL_S
    # no server paths in answers: documents named relative to the corpus folder
    assert all(not p.startswith("/") for a in answers for p in (*a.paths, *a.sources)), answers[-1]
    # keep=1 pruned the generations nobody held any more; none was removed while a request read it (no failure)
    remaining = sorted(p.name for p in (index / "generations").iterdir())
    assert "g000003" in remaining
    # g000001's leases ended with the replicas' switch to g000002: the delete's prune removed it (issue 40, item 5)
    assert "g000001" not in remaining, remaining
