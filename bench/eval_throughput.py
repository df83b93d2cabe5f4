"""Throughput of the evaluation job (questions/s) with the scripted LLM at 1 and 2 answering workers.

    .venv/bin/python bench/eval_throughput.py [--questions 2000] [--mode dual] [--shards 16] [--workers 1,2]

Builds a small index once (the HotpotQA test fixture's 10 passages, scripted LLM + hashing embedder, through
``jobs.index``), generates ``--questions`` generic-format questions over it (each names a passage title and
has that passage as its gold passage), then runs ``jobs.evaluate`` into a fresh output per worker count on
one local Ray (2 CPUs). questions/s is the job's own figure: questions answered / seconds of the answering
stage (actor start-up included, Ray start-up and index build excluded). Prints one line per worker count and
the ratio of the last to the first.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from hxd2_ray.evaluation.datasets import load_corpus_hotpotqa, write_corpus_jsonl

ROOT = Path(__file__).resolve().parents[1]
HOTPOT = ROOT / "tests" / "data" / "eval" / "hotpotqa"
FAST = ["--set", "ray.num_cpus=2", "--set", "ray.ner_batch_size=4", "--set", "embedding.dim=64"]


def _quiet(fn, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = fn(*args)
    if code != 0:
        raise SystemExit(f"job failed with exit {code}")
    return out.getvalue()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=2000)
    p.add_argument("--mode", default="dual")
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--workers", default="1,2")
    args = p.parse_args()
    workers = [int(w) for w in args.workers.split(",")]

    import ray

    from jobs import evaluate as eval_job
    from jobs import index as index_job

    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}},
    )
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        passages = load_corpus_hotpotqa(HOTPOT / "corpus.json")
        write_corpus_jsonl(passages, base / "corpus" / "passages.jsonl")
        t0 = time.perf_counter()
        _quiet(index_job.main, ["--input", str(base / "corpus"), "--output", str(base / "index"), *FAST, "--json"])
        print(f"index: {len(passages)} passages in {time.perf_counter() - t0:.1f}s")
        qfile = base / "questions.jsonl"
        with qfile.open("w") as f:
            for i in range(args.questions):
                p_ = passages[i % len(passages)]
                q = f"Question {i}: what does the passage about {p_['title']} say?"
                f.write(
                    json.dumps(
                        {"id": f"q{i:04d}", "question": q, "answers": [p_["title"]], "gold_passages": [p_["id"]]}
                    )
                    + "\n"
                )
        results = {}
        for w in workers:
            out = base / f"run-w{w}"
            text = _quiet(
                eval_job.main,
                [
                    "run",
                    "--benchmark",
                    "generic",
                    "--questions",
                    str(qfile),
                    "--index",
                    str(base / "index"),
                    "--output",
                    str(out),
                    "--mode",
                    args.mode,
                    "--workers",
                    str(w),
                    "--shards",
                    str(args.shards),
                    *FAST,
                    "--json",
                ],
            )
            s = json.loads(text)
            results[w] = s["questions_per_s"]
            lat = s["per_mode"][args.mode]["latency_s"]
            print(
                f"workers={w}: {s['answered_this_run']} questions in {s['answer_seconds']:.1f}s -> "
                f"{s['questions_per_s']:.2f} questions/s (per-question p50 {lat['p50'] * 1000:.0f} ms, "
                f"p95 {lat['p95'] * 1000:.0f} ms; summed answering work {lat['mean'] * s['answered_this_run']:.1f}s)"
            )
        if len(workers) > 1:
            ratio = results[workers[-1]] / results[workers[0]]
            print(f"ratio workers={workers[-1]} / workers={workers[0]}: {ratio:.2f}x")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
