"""What extraction computes, two commits back to back on the same passages: the tokens the engine computes, the wall
time and the graph.

    .venv/bin/python bench/extraction_tokens.py --base REV [--head REV|worktree] [--passages 60] [--corpus FILE]
                                                [--config configs/local.yaml] [--json-out FILE]

The first ``--passages`` of a HippoRAG corpus file (default ``../shared/data/hipporag-multihop/hotpotqa_train_corpus
.json``, the 994-passage HotpotQA corpus) are written once as ``passages.jsonl``, then indexed by ``hxd2 index
--config CONFIG --json --set llm_cache.enabled=false`` (a subprocess, fresh output folder, its own Ray) from a
checkout of ``--base`` (``git archive``) and then from ``--head`` (a commit, a folder, or this working tree), one
right after the other on the same machine. Every Python process of both runs loads
``bench/engine_tally/sitecustomize.py``, which records what vLLM's ``RequestOutput`` says about each request (prompt
tokens, ``num_cached_tokens``: the prompt tokens served from the prefix cache, generated tokens, finish reasons), so
both commits are counted by the same code, whatever their own summaries report.

Printed per side: wall seconds (the whole ``hxd2 index`` process), extract-stage seconds, requests, prompt / prefix-
cached / generated tokens, computed tokens (prompt - cached + generated) in total and per chunk, replies cut by
max_tokens, entities and relations of the graph, malformed records and ungrounded entities; then head ÷ base.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TALLY_DIR = REPO / "bench" / "engine_tally"
DEFAULT_CORPUS = REPO.parent / "shared" / "data" / "hipporag-multihop" / "hotpotqa_train_corpus.json"


def write_corpus(source: Path, passages: int, folder: Path) -> int:
    sys.path.insert(0, str(REPO))
    from hxd2_ray.evaluation.datasets import load_corpus_hotpotqa  # HippoRAG's title -> sentences, or a list

    rows = load_corpus_hotpotqa(source)[:passages]
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "passages.jsonl").open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    return len(rows)


def checkout(rev: str, into: Path) -> str:
    """The tree of ``rev`` under ``into`` (no git state touched); returns the full commit id."""
    commit = subprocess.run(
        ["git", "rev-parse", rev], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()
    into.mkdir(parents=True)
    archive = subprocess.Popen(["git", "archive", commit], cwd=REPO, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SystemExit(f"git archive {rev} failed")
    return commit


def tally(path: Path) -> dict[str, int]:
    total = {"requests": 0, "prompt": 0, "cached": 0, "generated": 0, "length": 0}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            for key, value in json.loads(line).items():
                total[key] = total.get(key, 0) + int(value)
    return total


def index(tree: Path, config: str, corpus: Path, output: Path, tally_file: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(
        {
            "PYTHONPATH": f"{TALLY_DIR}{os.pathsep}{tree}",
            "HXD2_ENGINE_TALLY": str(tally_file),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
    )
    command = [sys.executable, "-m", "jobs.cli", "index", "--config", config, "--input", str(corpus)]
    command += ["--output", str(output), "--json", "--set", "llm_cache.enabled=false"]
    load = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"hxd2 index in {tree} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout)
    engine = tally(tally_file)
    computed = engine["prompt"] - engine["cached"] + engine["generated"]
    run = summary.get("run") or {}
    return {
        "wall_s": round(wall, 1),
        "extract_s": round(float(summary["seconds_per_stage"].get("extract", 0.0)), 1),
        "load_at_start": round(load, 1),
        "chunks": summary["chunks"],
        "requests": engine["requests"],
        "prompt_tokens": engine["prompt"],
        "prefix_cached_tokens": engine["cached"],
        "cached_share": round(engine["cached"] / engine["prompt"], 3) if engine["prompt"] else None,
        "generated_tokens": engine["generated"],
        "computed_tokens": computed,
        "computed_per_chunk": round(computed / summary["chunks"], 1) if summary["chunks"] else None,
        "replies_cut_by_max_tokens": engine["length"],
        "entities": summary["entities"],
        "relations": summary["relations"],
        "malformed_records": summary["malformed_records"],
        "ungrounded_entities": summary.get("ungrounded_entities", 0),
        "summary_llm_calls": run.get("llm_calls"),
        "summary_prefix_cached_tokens": run.get("prefix_cached_tokens"),  # absent before the summary reported it
    }


ROWS = (
    ("wall_s", "wall s"),
    ("extract_s", "extract stage s"),
    ("requests", "requests"),
    ("prompt_tokens", "prompt tokens"),
    ("prefix_cached_tokens", "prefix-cached tokens"),
    ("cached_share", "cached share"),
    ("generated_tokens", "generated tokens"),
    ("computed_tokens", "computed tokens"),
    ("computed_per_chunk", "computed tokens per chunk"),
    ("replies_cut_by_max_tokens", "replies cut by max_tokens"),
    ("entities", "entities"),
    ("relations", "relations"),
    ("malformed_records", "malformed records"),
    ("ungrounded_entities", "ungrounded entities"),
    ("load_at_start", "load average at start"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the commit to compare against (e.g. the one before a change)")
    ap.add_argument(
        "--head", default="worktree", help="a commit, a folder holding a tree, or 'worktree' (default): this checkout"
    )
    ap.add_argument("--passages", type=int, default=60)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--config", default="configs/local.yaml")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="hxd2-extraction-tokens-") as tmp:
        root = Path(tmp)
        n = write_corpus(args.corpus, args.passages, root / "corpus")
        sides: dict[str, dict[str, Any]] = {}
        for side, rev in (("base", args.base), ("head", args.head)):
            if rev == "worktree":
                tree, commit = REPO, "worktree"
            elif Path(rev).is_dir():
                tree, commit = Path(rev).resolve(), f"tree:{rev}"
            else:
                tree, commit = root / side, ""
                commit = checkout(rev, tree)
            print(f"[{side}] {commit}: indexing {n} passages ...", file=sys.stderr, flush=True)
            sides[side] = {
                "commit": commit,
                **index(tree, args.config, root / "corpus", root / f"out-{side}", root / f"tally-{side}.jsonl"),
            }
            print(f"[{side}] {json.dumps(sides[side])}", file=sys.stderr, flush=True)

    base, head = sides["base"], sides["head"]
    print(f"{n} passages, {args.config}; base {base['commit'][:12]}, head {head['commit'][:12]}")
    print(f"{'':<28}{'base':>12}{'head':>12}{'head/base':>11}")
    for key, label in ROWS:
        b, h = base[key], head[key]
        ratio = f"{h / b:.3f}" if isinstance(b, (int, float)) and isinstance(h, (int, float)) and b else "-"
        print(f"{label:<28}{b!s:>12}{h!s:>12}{ratio:>11}")
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps({"passages": n, "config": args.config, **sides}, indent=2) + "\n")


if __name__ == "__main__":
    main()
