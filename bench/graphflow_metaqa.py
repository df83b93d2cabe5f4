"""GraphFlow on MetaQA: train a policy per hop on a fixed split of the official dev sets, report the held-out part.

    .venv/bin/python bench/graphflow_metaqa.py --index /work/runs/metaqa_index_hashing \
        --set 'embedding={backend: hashing, dim: 384}' --output /work/runs/graphflow/metaqa [--hops 1,2,3] \
        [--max-train N] [--set graphflow.epochs=4 ...] [--latency 100]

For each hop: ``../shared/data/metaqa/{h}-hop/qa_dev.txt`` (the official dev questions, MetaQA's own
``question TAB answers`` format, read by the evaluation job's loader) split 80/10/10 by question (seeded; the
policy never trains on a dev or test question), a policy trained with the library loop (one process; the Ray
Train job runs the same loop, see ``bench/graphflow_throughput.py``), then on the test part: Hit@1, Hit@5, MRR,
Recall@20 and Diverse-Recall@20 of the raw trajectory results, and the inference latency per question through
:class:`~hxd2_ray.graphflow.retriever.GraphFlowRetriever` (one question at a time, p50/p95, CPU, 1 thread).
Writes ``<output>/results.json``, ``results.md`` and ``metaqa.png``; inputs are cached under ``<output>/inputs``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

TARGETS = {1: 0.95, 2: 0.90, 3: 0.85}
ANCHORS = {"NSM": {1: 0.971, 2: 0.999, 3: 0.989}, "UniKGQA": {1: 0.975, 2: 0.990, 3: 0.991}}


def log(msg: str) -> None:
    print(f"[bench graphflow-metaqa] {msg}", file=sys.stderr, flush=True)


def load_avg() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def inputs_for(
    hop: int, index, embedder, gcfg, data_root: Path, cache: Path, max_train: int | None, feature_embedder=None
):
    from hxd2_ray.graphflow.dataset import index_inputs, load_items

    features = f"-{feature_embedder.model_id}" if feature_embedder is not None else ""
    segments = f"-q{gcfg.question_segments}" if gcfg.question_segments else ""
    segments += f"-{gcfg.demonstrations}{gcfg.chain_max_frontier}" if gcfg.demonstrations == "chain" else ""
    segments += "-returns" if gcfg.return_to_start and gcfg.demonstrations == "chain" else ""
    key = f"{index.manifest.fingerprint}-{embedder.model_id}{features}-{gcfg.seed}-{gcfg.max_steps}{segments}"
    path = cache / f"{hop}hop-{key}.pkl"
    if path.exists():
        with path.open("rb") as fh:
            inputs = pickle.load(fh)
    else:
        items, summary = load_items(f"metaqa-{hop}hop", [str(data_root / "metaqa" / f"{hop}-hop" / "qa_dev.txt")])
        inputs = index_inputs(index, embedder, items, gcfg, load_summary=summary, feature_embedder=feature_embedder)
        cache.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            pickle.dump(inputs, fh)
    if max_train is not None and len(inputs.train) > max_train:
        from hxd2_ray.graphflow.training_inputs import SplitVectors

        vec = inputs.vectors["train"]
        inputs.train, inputs.demos = inputs.train[:max_train], inputs.demos[:max_train]
        inputs.vectors["train"] = SplitVectors(
            vec.policy[:max_train] if vec.policy is not None else None, vec.plain[:max_train]
        )
    return inputs


def latency(index, embedder, policy_dir: Path, gcfg, questions: list[str], feature_embedder=None) -> dict[str, float]:
    import numpy as np

    from hxd2_ray.graphflow.retriever import GraphFlowRetriever

    retriever = GraphFlowRetriever.open(index, embedder, str(policy_dir), gcfg, feature_embedder=feature_embedder)
    retriever.retrieve(questions[0])  # warm
    times = []
    for q in questions:
        t0 = time.perf_counter()
        retriever.retrieve(q)
        times.append((time.perf_counter() - t0) * 1000)
    return {
        "n": len(times),
        "p50_ms": round(float(np.percentile(times, 50)), 2),
        "p95_ms": round(float(np.percentile(times, 95)), 2),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index", required=True)
    p.add_argument("--config", default="configs/local.yaml")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--output", required=True)
    p.add_argument("--hops", default="1,2,3")
    p.add_argument("--data-root", default="../shared/data")
    p.add_argument("--max-train", type=int, default=None, help="first N training questions only")
    p.add_argument("--latency", type=int, default=100, help="test questions timed one at a time")
    p.add_argument(
        "--evaluate-only",
        action="store_true",
        help="score the policies an earlier run left in --output instead of training them",
    )
    p.add_argument(
        "--split",
        choices=("test", "dev"),
        default="test",
        help="dev: score that split instead (to choose inference settings on it; with --evaluate-only, "
        "written to dev_results.json, never to the report)",
    )
    args = p.parse_args()
    if args.split == "dev" and not args.evaluate_only:
        p.error("--split dev scores policies a run left in --output: add --evaluate-only")

    import torch

    from hxd2_ray.config import load_config
    from hxd2_ray.graphflow.evaluation import evaluate_policy
    from hxd2_ray.graphflow.policy import load_policy
    from hxd2_ray.graphflow.trainer import export_policy, train_policy
    from hxd2_ray.retrieval.index import open_index
    from hxd2_ray.wiring import build_embedder

    cfg = load_config(args.config, args.overrides)
    gcfg = cfg.graphflow
    torch.set_num_threads(gcfg.torch_threads or 1)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {"hops": {}}
    embedder = build_embedder(cfg.embedding)
    # graphflow.feature_embedding: the policy's features (names, labels, questions) from another embedder
    feature_embedder = build_embedder(gcfg.feature_embedding) if gcfg.feature_embedding is not None else None
    with open_index(args.index, cfg) as index:
        for hop in [int(h) for h in args.hops.split(",")]:
            log(f"{hop}-hop: preparing ({load_avg()})")
            inputs = inputs_for(
                hop, index, embedder, gcfg, Path(args.data_root), out / "inputs", args.max_train, feature_embedder
            )
            policy_dir = out / f"policy_{hop}hop"
            if args.evaluate_only:  # rescore the policy trained by an earlier run (e.g. after an inference change)
                policy = load_policy(policy_dir, inputs.features, inputs.index_fingerprint)
                summary = json.loads((policy_dir / "training_summary.json").read_text())
                train_s = results["hops"].get(str(hop), {}).get("train_seconds") or sum(
                    h["train_seconds"] for h in summary["history"]
                )  # the epochs' own time when no run recorded it
            else:
                t0 = time.perf_counter()
                result = train_policy(inputs, gcfg, policy_dir)
                train_s = time.perf_counter() - t0
                summary = export_policy(result, inputs, policy_dir)
                result.policy.load_state_dict(result.best_state)
                policy = result.policy
            scored = inputs.dev if args.split == "dev" else inputs.test
            vec = inputs.vectors[args.split]
            t0 = time.perf_counter()
            scores = evaluate_policy(
                policy,
                scored,
                vec.policy,
                vec.plain,
                mode=gcfg.inference,
                width=gcfg.trajectories,
                min_prob=gcfg.beam_min_prob,
                exclude_starts=gcfg.exclude_starts,
                ranking=gcfg.ranking,
                progress=log,
                merge=gcfg.beam_merge,
            )
            if args.split == "dev":
                dev_path = out / "dev_results.json"
                dev = json.loads(dev_path.read_text()) if dev_path.exists() else {}
                point = {
                    "inference": gcfg.inference,
                    "trajectories": gcfg.trajectories,
                    "ranking": gcfg.ranking,
                    "exclude_starts": gcfg.exclude_starts,
                    "beam_min_prob": gcfg.beam_min_prob,
                    "beam_merge": gcfg.beam_merge,
                }
                key = f"{hop}hop " + " ".join(f"{k}={v}" for k, v in point.items())
                dev[key] = {**point, "hop": hop, "n": scores.n, "metrics": scores.metrics}
                dev_path.write_text(json.dumps(dev, indent=2) + "\n")
                log(f"{hop}-hop dev ({key}): " + ", ".join(f"{k} {v:.4f}" for k, v in scores.metrics.items()))
                continue
            lat = latency(
                index,
                embedder,
                policy_dir,
                gcfg,
                [_marked(e) if e.link is not None else e.question for e in inputs.test[: args.latency]],
                feature_embedder,
            )
            results["hops"][str(hop)] = {
                "test": scores.to_dict(),
                "train_questions": len(inputs.train),
                "dev": len(inputs.dev),
                "status": summary["status"],
                "best_epoch": summary["best_epoch"],
                "epochs_run": summary["epochs_run"],
                "train_seconds": round(train_s, 1),
                "eval_seconds": round(time.perf_counter() - t0, 1),
                "history": summary["history"],
                "latency": lat,
                "load": load_avg(),
                "examples": inputs.summary.get("examples"),
                "target": TARGETS[hop],
            }
            log(
                f"{hop}-hop: test Hit@1 {scores.metrics['hit@1']:.4f} (target {TARGETS[hop]}), "
                f"R@20 {scores.metrics['recall@20']:.4f}, D-R@20 {scores.metrics['diverse_recall@20']:.4f}, "
                f"p50 {lat['p50_ms']} ms"
            )
            results.update(
                {
                    "index": args.index,
                    "embedding": embedder.model_id,
                    "feature_embedding": feature_embedder.model_id if feature_embedder else None,
                    "config": gcfg.model_dump(mode="json", exclude={"feature_embedding"}),
                }
            )
            results_path.write_text(json.dumps(results, indent=2) + "\n")
    if args.split == "test":
        write_report(results, out)
    return 0


def _marked(example) -> str:
    """The question as the file gives it (with its [topic entity]), rebuilt from the link."""
    link = example.link
    text = link.question
    for s in link.starts:
        if s.mention and s.mention in text:
            text = text.replace(s.mention, f"[{s.mention}]", 1)
    return text


def write_report(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hops = sorted(results["hops"], key=int)
    rows = [
        "| hop | test questions | Hit@1 (target) | Hit@5 | MRR | Recall@20 | Diverse-Recall@20 | D-R / R | "
        "p50 ms | p95 ms | train questions | epochs (best) | train s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for h in hops:
        r = results["hops"][h]
        m = r["test"]["metrics"]
        ratio = m["diverse_recall@20"] / m["recall@20"] if m["recall@20"] else float("nan")
        rows.append(
            f"| {h}-hop | {r['test']['n']} | **{m['hit@1']:.3f}** ({r['target']}) | {m['hit@5']:.3f} | "
            f"{m['mrr']:.3f} | {m['recall@20']:.3f} | {m['diverse_recall@20']:.3f} | {ratio:.3f} | "
            f"{r['latency']['p50_ms']} | {r['latency']['p95_ms']} | {r['train_questions']} | "
            f"{r['epochs_run']} ({r['best_epoch']}) | {r['train_seconds']} |"
        )
    (out / "results.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    x = range(len(hops))
    width = 0.2
    ax1.bar(
        [i - width for i in x],
        [results["hops"][h]["test"]["metrics"]["hit@1"] for h in hops],
        width,
        label="GraphFlow (this KB, small heads)",
    )
    for j, (name, vals) in enumerate(ANCHORS.items()):
        ax1.bar([i + j * width for i in x], [vals[int(h)] for h in hops], width, label=f"{name} (full KB)", alpha=0.6)
    ax1.scatter(list(x), [TARGETS[int(h)] for h in hops], marker="_", s=600, color="k", label="target", zorder=3)
    ax1.set_xticks(list(x), [f"{h}-hop" for h in hops])
    ax1.set_ylim(0, 1.05)
    ax1.set_ylabel("Hits@1 (held-out)")
    ax1.legend(fontsize=7, loc="lower left")
    ax2.bar(
        [i - width / 2 for i in x],
        [results["hops"][h]["test"]["metrics"]["recall@20"] for h in hops],
        width,
        label="Recall@20",
    )
    ax2.bar(
        [i + width / 2 for i in x],
        [results["hops"][h]["test"]["metrics"]["diverse_recall@20"] for h in hops],
        width,
        label="Diverse-Recall@20",
    )
    ax2.set_xticks(list(x), [f"{h}-hop" for h in hops])
    ax2.set_ylim(0, 1.05)
    ax2.legend(fontsize=8, loc="lower left")
    ax2.set_title("raw trajectory results (duplicates counted in R)")
    fig.tight_layout()
    fig.savefig(out / "metaqa.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
