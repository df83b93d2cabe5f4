"""GraphFlow ablations on one MetaQA hop: SFT vs detailed balance, the exploration width k, the trajectories M.

    .venv/bin/python bench/graphflow_ablations.py --inputs /work/runs/graphflow/metaqa/inputs/2hop-....pkl \
        --output /work/runs/graphflow/ablations [--max-train 2000] [--epochs 3] [--ks 1,4,8] [--ms 1,4,16,32,64]

Every training variant is the ``graphflow`` section of ``--config`` (the inputs must have been prepared with it:
demonstrations, question word runs, walks back to the start) with one change, sees the same questions (the first
``--max-train`` of the cached training split), the same seed and epochs (early stopping on the same dev subset),
and is scored on the same held-out test questions: the objective (``db`` vs its ``sft`` reduction) at k = 4, then
``db`` at each k; M (beam width, and M sampled trajectories) is an inference setting, swept on the k = 4 policy of
the config's own objective. Writes ``ablations.json``, ``ablations.md`` and ``ablations.png``.
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def log(msg: str) -> None:
    print(f"[bench graphflow-ablations] {msg}", file=sys.stderr, flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inputs", required=True)
    p.add_argument("--config", default="configs/local.yaml")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--output", required=True)
    p.add_argument("--max-train", type=int, default=2000)
    p.add_argument("--max-test", type=int, default=500)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--ks", default="1,4,8")
    p.add_argument("--ms", default="1,4,16,32,64")
    args = p.parse_args()

    import torch

    from hxd2_ray.config import load_config
    from hxd2_ray.graphflow.evaluation import evaluate_policy
    from hxd2_ray.graphflow.trainer import train_policy
    from hxd2_ray.graphflow.training_inputs import SplitVectors

    torch.set_num_threads(1)
    with open(args.inputs, "rb") as fh:
        inputs = pickle.load(fh)
    n = min(args.max_train, len(inputs.train))
    vec = inputs.vectors["train"]
    inputs.train, inputs.demos = inputs.train[:n], inputs.demos[:n]
    inputs.vectors["train"] = SplitVectors(vec.policy[:n] if vec.policy is not None else None, vec.plain[:n])
    test, tvec = inputs.test[: args.max_test], inputs.vectors["test"]
    tpol = tvec.policy[: len(test)] if tvec.policy is not None else None
    tplain = tvec.plain[: len(test)]
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    shipped = load_config(args.config, args.overrides).graphflow
    base = dict(epochs=args.epochs, patience=args.epochs, batch_questions=32, torch_threads=1, max_dev_questions=200)
    ks = [int(k) for k in args.ks.split(",")]
    variants = [("db", 4), ("sft", 4)] + [("db", k) for k in ks if k != 4]
    rows = []
    policies = {}
    for objective, k in variants:
        cfg = type(shipped)(**{**shipped.model_dump(), **base, "objective": objective, "explore_k": k})
        t0 = time.perf_counter()
        result = train_policy(inputs, cfg, tempfile.mkdtemp(prefix="gf-abl-"), progress=log)
        seconds = time.perf_counter() - t0
        result.policy.load_state_dict(result.best_state)
        scores = evaluate_policy(
            result.policy,
            test,
            tpol,
            tplain,
            mode="beam",
            width=32,
            ranking=cfg.ranking,
            exclude_starts=cfg.exclude_starts,
            merge=cfg.beam_merge,
        )
        transitions = sum(h["transitions"] for h in result.history)
        rows.append(
            {
                "objective": objective,
                "k": k,
                "M": 32,
                "inference": "beam",
                **scores.metrics,
                "train_seconds": round(seconds, 1),
                "transitions": transitions,
                "best_epoch": result.best_epoch,
                "dev_hit@1": [h["dev_hit@1"] for h in result.history],
            }
        )
        policies[(objective, k)] = result.policy
        log(f"{objective} k={k}: {json.dumps(scores.metrics)}")
    m_rows = []
    policy = policies[(shipped.objective, 4)]
    for m in [int(x) for x in args.ms.split(",")]:
        for mode in ("beam", "sample"):
            t0 = time.perf_counter()
            scores = evaluate_policy(
                policy,
                test,
                tpol,
                tplain,
                mode=mode,
                width=m,
                ranking=shipped.ranking,
                exclude_starts=shipped.exclude_starts,
                merge=shipped.beam_merge,
            )
            m_rows.append(
                {
                    "M": m,
                    "inference": mode,
                    **scores.metrics,
                    "ms_per_question": round((time.perf_counter() - t0) * 1000 / max(len(test), 1), 2),
                }
            )
            log(f"M={m} {mode}: {json.dumps(scores.metrics)}")
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    report = {
        "inputs": args.inputs,
        "config": args.config,
        "overrides": args.overrides,
        "m_objective": shipped.objective,
        "train_questions": n,
        "test_questions": len(test),
        "epochs": args.epochs,
        "training_variants": rows,
        "inference_M": m_rows,
        "load": load,
    }
    (out / "ablations.json").write_text(json.dumps(report, indent=2) + "\n")
    write_report(report, out)
    return 0


def write_report(report: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("hit@1", "hit@5", "mrr", "recall@20", "diverse_recall@20")
    lines = [
        f"Training variants ({report['train_questions']} training questions, {report['epochs']} epochs at most, "
        f"{report['test_questions']} test questions, beam M=32):",
        "",
        "| objective | k | " + " | ".join(keys) + " | train s | best epoch |",
        "|---|---:|" + "---:|" * (len(keys) + 2),
    ]
    for r in report["training_variants"]:
        lines.append(
            f"| {r['objective']} | {r['k']} | "
            + " | ".join(f"{r[k]:.3f}" for k in keys)
            + f" | {r['train_seconds']} | {r['best_epoch']} |"
        )
    lines += [
        "",
        f"Trajectories M ({report['m_objective']}, k=4):",
        "",
        "| M | inference | " + " | ".join(keys) + " | ms/question |",
        "|---:|---|" + "---:|" * (len(keys) + 1),
    ]
    for r in report["inference_M"]:
        lines.append(
            f"| {r['M']} | {r['inference']} | "
            + " | ".join(f"{r[k]:.3f}" for k in keys)
            + f" | {r['ms_per_question']} |"
        )
    (out / "ablations.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    labels = [f"{r['objective']} k={r['k']}" for r in report["training_variants"]]
    x = range(len(labels))
    for j, key in enumerate(("hit@1", "recall@20", "diverse_recall@20")):
        ax1.bar([i + (j - 1) * 0.25 for i in x], [r[key] for r in report["training_variants"]], 0.25, label=key)
    ax1.set_xticks(list(x), labels, fontsize=8)
    ax1.set_ylim(0, 1.05)
    ax1.legend(fontsize=8)
    ax1.set_title("objective and exploration width k")
    for mode in ("beam", "sample"):
        rows = [r for r in report["inference_M"] if r["inference"] == mode]
        ax2.plot([r["M"] for r in rows], [r["hit@1"] for r in rows], marker="o", label=f"Hit@1, {mode}")
        ax2.plot(
            [r["M"] for r in rows],
            [r["recall@20"] for r in rows],
            marker="x",
            linestyle="--",
            label=f"Recall@20, {mode}",
        )
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("M (trajectories)")
    ax2.set_ylim(0, 1.05)
    ax2.legend(fontsize=8)
    ax2.set_title(f"trajectories M ({report['m_objective']}, k=4)")
    fig.tight_layout()
    fig.savefig(out / "ablations.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
