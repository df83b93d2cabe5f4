"""GraphFlow passage retrieval on HotpotQA-100: recall@2/@5 by 5-fold cross-validation, beside the chunk-vector
baseline in the same run.

    .venv/bin/python bench/graphflow_hotpot.py --index /work/runs/hotpot_index --output /work/runs/graphflow/hotpot \
        [--config configs/local.yaml] [--folds 5] [--set graphflow.epochs=10 ...]

The index is the text index of the 994-passage corpus (``hxd2 index`` with the small models; read only here). The
100 questions (``hotpotqa`` benchmark: gold passages are corpus ids = the documents' source ids) are linked to
start entities through the question channel (no brackets), their targets are the chunks of the gold passages.
Five seeded folds: a policy is trained on four (10% of them held out for early stopping) and scores the fifth;
a question without a start node or whose gold passage has no chunk in the index scores 0 (it stays in the
denominator). The baseline, in the same run and on the same folds: the question's embedding against the chunk
vectors alone (``chunk_vector``), passages in the order of their best chunk. Writes ``hotpot.json``,
``hotpot.md``, ``hotpot.png``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

KS = (2, 5)


def log(msg: str) -> None:
    print(f"[bench graphflow-hotpot] {msg}", file=sys.stderr, flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index", required=True)
    p.add_argument("--config", default="configs/local.yaml")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--output", required=True)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--data-root", default=None)
    args = p.parse_args()
    if not (Path(args.index) / "manifest.json").exists():
        print(f"no complete index at {args.index}: figure not measured", file=sys.stderr)
        return 2

    import numpy as np
    import torch

    from hxd2_ray.config import load_config
    from hxd2_ray.evaluation import metrics as M
    from hxd2_ray.graphflow.dataset import load_items
    from hxd2_ray.graphflow.evaluation import evaluate_policy
    from hxd2_ray.graphflow.examples import build_examples
    from hxd2_ray.graphflow.features import load_or_build_features
    from hxd2_ray.graphflow.linking import StartLinker
    from hxd2_ray.graphflow.trainer import train_policy
    from hxd2_ray.graphflow.training_inputs import prepare_inputs, question_vectors
    from hxd2_ray.retrieval.index import open_index
    from hxd2_ray.wiring import build_embedder

    cfg = load_config(args.config, args.overrides)
    gcfg = cfg.graphflow
    torch.set_num_threads(gcfg.torch_threads or 1)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    embedder = build_embedder(cfg.embedding)
    items, load_summary = load_items("hotpotqa", data_root=args.data_root)
    started = time.perf_counter()
    with open_index(args.index, cfg) as index:
        features = load_or_build_features(
            index, embedder, cache_dir=gcfg.cache_dir, chunk_text_chars=gcfg.chunk_text_chars, progress=log
        )
        graph = features.graph
        linker = StartLinker.for_index(index, graph, embedder, gcfg)
        examples = build_examples(items, graph, linker, "passages", keep_unlinked=True)
        log(f"{len(examples.examples)} examples, skipped {examples.reasons()}, {examples.unlinked} without a start")
        # the baseline: chunk vectors alone
        chunk_family = index.family("chunk")
        q_vectors = embedder.embed([it.question for it in items])
        source_of = {graph.keys[graph.n_entities + i]: s for i, s in enumerate(graph.chunk_sources)}
        baseline = {}
        for it, hits in zip(items, chunk_family.search(np.asarray(q_vectors), 50)):
            baseline[it.id] = list(dict.fromkeys(source_of[c] for c, _ in hits if c in source_of))
    by_id = {e.id: e for e in examples.examples}
    order = np.random.default_rng(gcfg.seed).permutation(len(items))
    folds = [order[f :: args.folds] for f in range(args.folds)]
    rows = []
    per_fold = []
    for f, test_idx in enumerate(folds):
        test_ids = {items[i].id for i in test_idx}
        train_pool = [by_id[items[i].id] for i in order if items[i].id not in test_ids and items[i].id in by_id]
        rng = np.random.default_rng([gcfg.seed, f])
        dev_mask = rng.random(len(train_pool)) < 0.1
        train = [e for e, d in zip(train_pool, dev_mask) if not d]
        dev = [e for e, d in zip(train_pool, dev_mask) if d]
        test = [by_id[items[i].id] for i in test_idx if items[i].id in by_id]
        inputs = prepare_inputs(
            features, embedder, train, dev, test, gcfg, "passages", features.index_fingerprint, progress=log
        )
        t0 = time.perf_counter()
        result = train_policy(inputs, gcfg, tempfile.mkdtemp(prefix="gf-hotpot-"), progress=log)
        result.policy.load_state_dict(result.best_state)
        vec = question_vectors(embedder, test, gcfg.encoder == "lora", gcfg.question_segments)
        scores = evaluate_policy(
            result.policy,
            test,
            vec.policy,
            vec.plain,
            mode=gcfg.inference,
            width=gcfg.trajectories,
            exclude_starts=gcfg.exclude_starts,
            ranking=gcfg.ranking,
            keep_rows=True,
            merge=gcfg.beam_merge,
        )
        got = {r["id"]: r["scores"] for r in scores.rows}
        for i in test_idx:
            it = items[i]
            gf = got.get(it.id, {})
            row = {"id": it.id, "fold": f, "linked": bool(by_id.get(it.id) and by_id[it.id].starts)}
            for k in KS:
                row[f"graphflow_recall@{k}"] = gf.get(f"passage_recall@{k}", 0.0)
                row[f"chunk_vector_recall@{k}"] = M.recall_at_k(baseline[it.id], it.gold_passages, k)
            rows.append(row)
        per_fold.append(
            {
                "fold": f,
                "train": len(inputs.train),
                "dev": len(dev),
                "test": len(test_idx),
                "best_epoch": result.best_epoch,
                "train_seconds": round(time.perf_counter() - t0, 1),
            }
        )
        log(
            f"fold {f}: "
            + ", ".join(f"{k} {np.mean([r[k] for r in rows if r['fold'] == f]):.3f}" for k in rows[-1] if "recall" in k)
        )
    summary = {k: round(float(np.mean([r[k] for r in rows])), 4) for k in rows[0] if "recall" in k}
    report = {
        "index": args.index,
        "questions": len(items),
        "folds": per_fold,
        "summary": summary,
        "linked_questions": sum(r["linked"] for r in rows),
        "examples": examples.summary(),
        "load": load_summary,
        "seconds": round(time.perf_counter() - started, 1),
        "machine_load": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "config": gcfg.model_dump(mode="json", exclude={"feature_embedding"}),
        "rows": rows,
    }
    (out / "hotpot.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        "| retrieval (5-fold CV, 100 questions) | recall@2 | recall@5 |",
        "|---|---:|---:|",
        f"| GraphFlow policy ({gcfg.objective}) | {summary['graphflow_recall@2']:.3f} | "
        f"{summary['graphflow_recall@5']:.3f} |",
        f"| chunk vectors alone | {summary['chunk_vector_recall@2']:.3f} | {summary['chunk_vector_recall@5']:.3f} |",
    ]
    (out / "hotpot.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(summary, out / "hotpot.png")
    return 0


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for j, name in enumerate(("graphflow", "chunk_vector")):
        ax.bar(
            [i + (j - 0.5) * 0.35 for i in range(len(KS))],
            [summary[f"{name}_recall@{k}"] for k in KS],
            0.35,
            label=name.replace("_", " "),
        )
    ax.set_xticks(range(len(KS)), [f"recall@{k}" for k in KS])
    ax.set_ylim(0, 1)
    ax.legend()
    ax.set_title("HotpotQA-100 passage recall, 5-fold CV")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
