"""Index wall time with the model in-process (``llm.backend: vllm``) vs over HTTP (``llm.backend: openai``).

    .venv/bin/python bench/openai_vs_inprocess.py [--passages 60] [--corpus FILE] [--json-out FILE]

The same HotpotQA passages (the first ``--passages`` of ``../shared/data/hipporag-multihop/hotpotqa_train_corpus.json``
unless ``--corpus`` names another HippoRAG corpus file) are indexed twice by ``hxd2 index`` (a subprocess,
so each run starts its own Ray, as a user's would):

1. ``configs/local.yaml``: SmolLM2-135M in vLLM inside the extraction actor;
2. ``configs/openai.yaml``: the same model, context, dtype and compact-JSON grammar in vLLM's OpenAI API server
   (``python -m vllm.entrypoints.openai.api_server``, started by this script, its start not counted), reached over
   HTTP on 127.0.0.1. While it runs the server's ``/metrics`` is read twice a second for the requests it is running
   and waiting on (the peak is printed).

Printed per run: total and extract-stage seconds, LLM calls, completion tokens, extract tokens/s, and the ratio
HTTP ÷ in-process (goal: within 1.10). Both runs use a fresh output folder and no LLM cache, so neither reuses the
other's replies.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "data" / "hipporag-multihop" / "hotpotqa_train_corpus.json"
SERVED_NAME = "SmolLM2-135M-Instruct"
_RUNNING = re.compile(r"^vllm:num_requests_(running|waiting)\{[^}]*\}\s+([0-9.e+]+)", re.MULTILINE)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return env


def write_corpus(source: Path, passages: int, folder: Path) -> int:
    from hxd2_ray.evaluation.datasets import load_corpus_hotpotqa  # HippoRAG's title -> sentences, or a list

    rows = load_corpus_hotpotqa(source)[:passages]
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "passages.jsonl").open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    return len(rows)


def index(config: str, corpus: Path, output: Path, extra: list[str]) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "jobs.cli",
        "index",
        "--config",
        config,
        "--input",
        str(corpus),
        "--output",
        str(output),
        "--json",
        "--set",
        "llm_cache.enabled=false",
        *extra,
    ]
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=REPO, env=_env(), capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"hxd2 index failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout)
    extract = float(summary["seconds_per_stage"].get("extract", 0.0))
    return {
        "wall_s": round(wall, 1),
        "extract_s": round(extract, 1),
        "chunks": summary["chunks"],
        "entities": summary["entities"],
        "relations": summary["relations"],
        "ungrounded_entities": summary["ungrounded_entities"],
        "ungrounded_relations": summary["ungrounded_relations"],
        "llm_calls": summary["llm_calls"],
        "completion_tokens": summary["completion_tokens"],
        "extract_tokens_per_s": round(summary["completion_tokens"] / extract, 1) if extract else None,
    }


class MetricsPoller(threading.Thread):
    """Peak running and waiting requests of the vLLM server while the HTTP run goes on."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.peak = url, threading.Event(), {"running": 0.0, "waiting": 0.0}

    def run(self) -> None:
        while not self.stop.wait(0.5):
            try:
                with urllib.request.urlopen(self.url, timeout=2) as resp:
                    text = resp.read().decode()
            except OSError:
                continue
            for kind, value in _RUNNING.findall(text):
                self.peak[kind] = max(self.peak[kind], float(value))


def start_server(port: int, log: Path) -> subprocess.Popen[bytes]:
    from hxd2_ray.llm.vllm_setup import api_server_command
    from hxd2_ray.models import smollm2_path

    command = api_server_command(sys.executable, smollm2_path(), SERVED_NAME, port)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
            env={**_env(), "VLLM_CPU_KVCACHE_SPACE": "2"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the vLLM server exited:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=3):
                return proc
        except OSError:
            time.sleep(2)
    raise SystemExit("the vLLM server did not start in 15 minutes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=60)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--json-out", type=Path, default=None)
    ap.add_argument("--max-concurrency", type=int, default=None, help="llm.max_concurrency of the HTTP run")
    ap.add_argument(
        "--reuse-in-process",
        type=Path,
        default=None,
        help="take the in-process run from an earlier --json-out (same passages) instead of running it",
    )
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    work = Path(tempfile.mkdtemp(prefix="hxd2-openai-bench-"))
    n = write_corpus(args.corpus, args.passages, work / "corpus")
    print(f"{n} passages from {args.corpus} in {work}", flush=True)
    results: dict[str, Any] = {"passages": n}
    if args.reuse_in_process is not None:
        results["in_process"] = json.loads(args.reuse_in_process.read_text())["in_process"]
    else:
        results["in_process"] = index(str(REPO / "configs" / "local.yaml"), work / "corpus", work / "inprocess", [])
    print("in-process:", results["in_process"], flush=True)
    port = _free_port()
    server = start_server(port, work / "vllm-server.log")
    try:
        poller = MetricsPoller(f"http://127.0.0.1:{port}/metrics")
        poller.start()
        results["http"] = index(
            str(REPO / "configs" / "openai.yaml"),
            work / "corpus",
            work / "http",
            [
                "--set",
                f"llm.base_url=http://127.0.0.1:{port}/v1",
                "--set",
                f"llm.model={SERVED_NAME}",
                "--set",
                "llm.tokenizer=builtin:smollm2-135m-instruct",
                *(["--set", f"llm.max_concurrency={args.max_concurrency}"] if args.max_concurrency else []),
            ],
        )
        poller.stop.set()
        results["http"]["server_peak_running"] = poller.peak["running"]
        results["http"]["server_peak_waiting"] = poller.peak["waiting"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=120)
    print("http:", results["http"], flush=True)
    results["ratio_wall"] = round(results["http"]["wall_s"] / results["in_process"]["wall_s"], 3)
    results["ratio_extract"] = round(results["http"]["extract_s"] / max(results["in_process"]["extract_s"], 1e-9), 3)
    print(f"HTTP / in-process: wall {results['ratio_wall']}, extract stage {results['ratio_extract']} (goal: <= 1.10)")
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
