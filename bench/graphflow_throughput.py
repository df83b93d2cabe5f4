"""GraphFlow training throughput (transitions/s) on Ray Train at 1 and 2 workers, in one run.

    .venv/bin/python bench/graphflow_throughput.py --inputs /work/runs/graphflow/metaqa/inputs/2hop-....pkl \
        [--max-train 1024] [--epochs 1] [--workers 1,2]

The same training inputs (a pickled :class:`~hxd2_ray.graphflow.trainer.TrainingInputs`, e.g. the MetaQA 2-hop
ones ``bench/graphflow_metaqa.py`` caches; or ``--synthetic`` for a generated graph) are trained by the Ray Train
job (``jobs.graphflow.fit_on_ray``: TorchTrainer, CPU workers, gradients averaged every step) for ``--epochs``
epochs at each worker count, one local Ray with 2 CPUs. A transition is one (state, candidate action) pair of the
loss: k+1 per decision state. transitions/s = all workers' transitions / the epoch's training seconds (dev
evaluation and checkpointing excluded), so it is the job's aggregate rate. Prints one line per worker count and
the ratio of the last to the first, with the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inputs", default=None, help="pickled TrainingInputs")
    p.add_argument("--synthetic", action="store_true", help="a generated movie graph instead")
    p.add_argument("--max-train", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--output", default=None, help="write the figures as JSON here")
    args = p.parse_args()

    import ray

    from hxd2_ray.config import GraphFlowConfig, HxdConfig, RayConfig
    from hxd2_ray.graphflow.training_inputs import SplitVectors
    from jobs.graphflow import fit_on_ray

    if args.synthetic:
        inputs = synthetic_inputs()
    else:
        with open(args.inputs, "rb") as fh:
            inputs = pickle.load(fh)
    n = min(args.max_train, len(inputs.train))
    vec = inputs.vectors["train"]
    inputs.train, inputs.demos = inputs.train[:n], inputs.demos[:n]
    inputs.vectors["train"] = SplitVectors(vec.policy[:n] if vec.policy is not None else None, vec.plain[:n])
    inputs.dev = inputs.dev[:64]
    inputs.vectors["dev"] = SplitVectors(
        *(v[:64] if v is not None else None for v in (inputs.vectors["dev"].policy, inputs.vectors["dev"].plain))
    )
    cfg = GraphFlowConfig(
        epochs=args.epochs,
        patience=args.epochs + 1,
        batch_questions=args.batch,
        torch_threads=1,
        max_dev_questions=64,
        learning_rate=5e-3,
    )
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows = []
    for workers in [int(w) for w in args.workers.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            final, checkpoint = fit_on_ray(inputs, cfg, Path(tmp), workers, HxdConfig(ray=RayConfig(num_cpus=2)))
            import torch

            with checkpoint.as_directory() as folder:
                history = torch.load(Path(folder) / "state.pt", map_location="cpu", weights_only=False)["history"]
        transitions = sum(h["transitions"] for h in history)
        seconds = sum(h["train_seconds"] for h in history)
        rows.append(
            {
                "workers": workers,
                "transitions": transitions,
                "train_seconds": round(seconds, 2),
                "transitions_per_s": round(transitions / seconds, 1),
                "questions": n,
                "load": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
            }
        )
        print(
            f"{workers} worker(s): {transitions:,} transitions in {seconds:.1f}s -> "
            f"{transitions / seconds:,.1f} transitions/s   ({rows[-1]['load']})",
            flush=True,
        )
    ray.shutdown()
    if len(rows) > 1:
        print(
            f"ratio {rows[-1]['workers']} / {rows[0]['workers']} workers: "
            f"x{rows[-1]['transitions_per_s'] / rows[0]['transitions_per_s']:.2f}"
        )
    if args.output:
        Path(args.output).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


def synthetic_inputs():
    from hxd2_ray.config import GraphFlowConfig
    from hxd2_ray.embedding.hashing import HashingEmbedder
    from hxd2_ray.graphflow.examples import build_examples, split_examples
    from hxd2_ray.graphflow.features import build_features
    from hxd2_ray.graphflow.linking import StartLinker
    from hxd2_ray.graphflow.synthetic import movie_world
    from hxd2_ray.graphflow.training_inputs import prepare_inputs

    world = movie_world(n_movies=400, n_people=150, seed=0)
    emb = HashingEmbedder(dim=64)
    feats = build_features(world.graph, emb, world.node_texts, progress=None)
    examples = build_examples(world.questions, world.graph, StartLinker(world.graph))
    train, dev, test = split_examples(examples.examples, 0.1, 0.1, seed=0)
    return prepare_inputs(feats, emb, train, dev, test, GraphFlowConfig(), "kgqa", "synthetic", progress=None)


if __name__ == "__main__":
    sys.exit(main())
