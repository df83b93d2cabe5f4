"""GraphFlow: train a retrieval policy over an index's graph on Ray Train, and evaluate one.

    hxd2 graphflow train --config configs/local.yaml --index runs/metaqa_index \
        --benchmark metaqa-1hop --questions ../shared/data/metaqa/1-hop/qa_dev.txt --output runs/policy [--workers N]
    hxd2 graphflow evaluate --config configs/local.yaml --index runs/metaqa_index --policy runs/policy \
        --benchmark metaqa-1hop --questions ../shared/data/metaqa/1-hop/qa_dev.txt [--split test|dev|train|all]

``train``: the driver opens the index, links the questions and finds the demonstrations (cached features, no
Ray), puts those inputs in the object store once, and runs the training loop of
:mod:`hxd2_ray.graphflow.trainer` on ``--workers`` Ray Train workers (TorchTrainer, data-parallel: the same
initial weights, gradients averaged over the workers with torch.distributed every step, CPU workers locally,
``graphflow.use_gpu`` on a cluster). Rank 0 reports a checkpoint every epoch to Ray Train's storage under
``<output>/_ray``; running the same command again resumes from the latest one. The best epoch's policy,
``training_summary.json`` and ``training.png`` are written to ``--output``. A non-finite loss stops training
with a message (exit status 3), keeping the last good checkpoint and exporting its best policy.

``evaluate``: the policy on the same seeded split it was trained with (``--split test`` by default: questions
never trained on), Hit@1, Hit@5, MRR, Recall@20, Diverse-Recall@20 (and passage recall@k), per hop.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import ray
import ray.train
import torch
import torch.distributed as dist
from ray.train import CheckpointConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from hxd2_ray.config import GraphFlowConfig
from hxd2_ray.errors import HxdError
from hxd2_ray.graphflow.dataset import index_inputs, load_items
from hxd2_ray.graphflow.evaluation import evaluate_policy
from hxd2_ray.graphflow.examples import TargetKind, build_examples, split_examples
from hxd2_ray.graphflow.policy import build_policy
from hxd2_ray.graphflow.retriever import GraphFlowRetriever
from hxd2_ray.graphflow.trainer import CHECKPOINT_STATE, TrainingResult, export_policy, train_policy
from hxd2_ray.graphflow.training_inputs import question_vectors
from hxd2_ray.retrieval.index import open_index
from hxd2_ray.retrieval.query_config import load_query_config
from hxd2_ray.wiring import build_embedder
from jobs import progress
from jobs.cli import run_and_report
from jobs.index_wiring import init_ray

SUBCOMMANDS = ("train", "evaluate")
_EXPECTED = (HxdError, ValueError, FileNotFoundError)
RUN_NAME = "graphflow-train"


def _log(msg: str) -> None:
    """A line of the command's own progress: through the job console's board when one is active (train: above the
    progress, while Ray's lines go to the log file), else straight to stderr (evaluate)."""
    board = progress.current()
    if isinstance(board, progress.NullBoard):
        print(f"[hxd2 graphflow] {msg}", file=sys.stderr, flush=True)
    else:
        board.note(f"graphflow: {msg}")


class ProgressRelay:
    """Rank 0's progress lines, carried to the driver through a Ray queue (a worker's own prints are Ray's
    forwarded output: in the log file, prefixed, and Ray Train echoes them twice) and printed there by a thread."""

    def __init__(self) -> None:
        from ray.util.queue import Queue

        self.queue = Queue(maxsize=10_000)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, name="hxd2-graphflow-progress", daemon=True)

    def __enter__(self) -> "ProgressRelay":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._flush()
        try:
            self.queue.shutdown()
        except Exception as exc:  # noqa: BLE001 - the queue's actor may already be gone with Ray
            _log(f"the progress queue did not shut down ({type(exc).__name__}: {exc})")

    def _flush(self) -> None:
        try:
            lines = self.queue.get_nowait_batch(self.queue.qsize())
        except Exception as exc:  # noqa: BLE001 - the queue's actor may already be gone with Ray
            _log(f"the last progress lines are lost ({type(exc).__name__}: {exc})")
            return
        for line in lines:
            _log(line)

    def _drain(self) -> None:
        from ray.util.queue import Empty

        while not self._stop.is_set():
            try:
                _log(self.queue.get(timeout=0.5))
            except Empty:
                continue
            except Exception as exc:  # noqa: BLE001 - Ray going down under the thread: the driver reports the outcome
                _log(f"progress lines stop here ({type(exc).__name__}: {exc})")
                return


def _relayed(queue: Any) -> Callable[[str], None]:
    lost = [0]

    def put(line: str) -> None:
        try:
            queue.put_nowait(line)
        except Exception as exc:  # noqa: BLE001 - a full or gone queue loses a progress line, never the training
            lost[0] += 1
            if lost[0] == 1:  # said once, in the worker's log: the driver's lines stop anyway
                print(f"[hxd2 graphflow] progress lines are lost ({type(exc).__name__}: {exc})", file=sys.stderr)

    return put


# ------------------------------------------------------------------------------------------- Ray Train side


class RayTrainRun:
    """Trainer hooks inside a Ray Train worker: rank and world from the train context, gradients and sums over
    torch.distributed (gloo on CPU), checkpoints through ``ray.train.report``."""

    def __init__(self) -> None:

        ctx = ray.train.get_context()
        self.rank = ctx.get_world_rank()
        self.world_size = ctx.get_world_size()

    def average_gradients(self, params: Sequence[Any]) -> None:
        if self.world_size == 1:
            return

        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.world_size
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).clone()
            offset += n

    def sum(self, values: Any) -> Any:
        if self.world_size == 1:
            return values

        t = torch.as_tensor(np.asarray(values, dtype=np.float64))
        dist.all_reduce(t)
        return t.numpy()

    @contextlib.contextmanager
    def latest_checkpoint(self) -> Iterator[Path | None]:

        ckpt = ray.train.get_checkpoint()
        if ckpt is None:
            yield None
            return
        with ckpt.as_directory() as folder:
            yield Path(folder)

    def save_checkpoint(self, epoch: int, write: Callable[[Path], None], metrics: dict[str, Any]) -> None:

        if self.rank != 0:
            ray.train.report(metrics)
            return
        folder = Path(tempfile.mkdtemp(prefix="graphflow-ckpt-"))
        try:
            write(folder)
            ray.train.report(
                metrics,
                checkpoint=ray.train.Checkpoint.from_directory(str(folder)),
                checkpoint_dir_name=f"epoch-{epoch:04d}",
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """What each Ray Train worker runs: the library's training loop with :class:`RayTrainRun` hooks."""

    cfg = GraphFlowConfig(**config["cfg"])
    torch.set_num_threads(cfg.torch_threads or 1)
    inputs = ray.get(config["inputs"])
    hooks = RayTrainRun()
    device = str(ray.train.torch.get_device()) if cfg.use_gpu else "cpu"
    relay = config.get("progress")
    result = train_policy(
        inputs,
        cfg,
        config["output"],
        hooks=hooks,
        device=device,
        progress=(_relayed(relay) if relay is not None else _log) if hooks.rank == 0 else None,
    )
    ray.train.report(
        {
            "final": True,
            "status": result.status,
            "message": result.message,
            "epochs_run": result.epochs_run,
            "best_epoch": result.best_epoch,
            "best_dev_hit@1": result.best_dev_hit1,
        }
    )


def fit_on_ray(inputs: Any, cfg: Any, output: Path, workers: int, hxd_cfg: Any) -> tuple[dict[str, Any], Any]:
    """Run the Ray Train job; returns (the final metrics of rank 0, the latest checkpoint or None)."""

    started_here = not ray.is_initialized()
    init_ray(hxd_cfg)
    try:
        with ProgressRelay() as relay:
            return _fit(inputs, cfg, output, workers, relay.queue)
    finally:
        if started_here:  # inside the job console: the lines Ray flushes as it stops land in the log file
            ray.shutdown()


def _fit(inputs: Any, cfg: Any, output: Path, workers: int, progress_queue: Any) -> tuple[dict[str, Any], Any]:
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={
            "inputs": ray.put(inputs),
            "cfg": cfg.model_dump(mode="json"),
            "output": str(output),
            "progress": progress_queue,
        },
        scaling_config=ScalingConfig(
            num_workers=workers,
            use_gpu=cfg.use_gpu,
            resources_per_worker={"CPU": 1, **({"GPU": 1} if cfg.use_gpu else {})},
        ),
        run_config=RunConfig(
            name=RUN_NAME,
            storage_path=str(output / "_ray"),
            checkpoint_config=CheckpointConfig(num_to_keep=cfg.keep_checkpoints),
        ),
    )
    result = trainer.fit()
    if result.error is not None:
        raise HxdError(f"the Ray Train job failed: {result.error}")
    return dict(result.metrics or {}), result.checkpoint


def _result_from_checkpoint(checkpoint: Any, inputs: Any, cfg: Any, final: dict[str, Any]) -> Any:

    policy = build_policy(inputs.features, cfg, inputs.kind, inputs.index_fingerprint)
    state: dict[str, Any] = {"history": [], "best": {"score": -1.0, "epoch": 0, "state": None}}
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            state = torch.load(Path(folder) / CHECKPOINT_STATE, map_location="cpu", weights_only=False)
    best = state["best"]
    return TrainingResult(
        status=str(final.get("status", "completed")),
        message=str(final.get("message", "")),
        epochs_run=len(state["history"]),
        best_epoch=int(best["epoch"]),
        best_dev_hit1=float(best["score"]),
        history=state["history"],
        best_state=best["state"],
        policy=policy,
    )


def feature_embedder_for(cfg: GraphFlowConfig, index_embedder: Any) -> Any:
    """The embedder of the features: ``graphflow.feature_embedding`` when set, else the index's own."""
    return index_embedder if cfg.feature_embedding is None else build_embedder(cfg.feature_embedding)


def run_train(args: argparse.Namespace) -> dict[str, Any]:
    cfg = load_query_config(args.index, args.config, args.overrides)
    gcfg = cfg.graphflow.model_copy(update={"workers": args.workers}) if args.workers else cfg.graphflow
    output = Path(args.output).expanduser().absolute()
    if (output / "policy.json").exists() and not (output / "_ray").exists():
        raise HxdError(f"{output} already holds a policy trained elsewhere; choose another --output")
    started = time.perf_counter()
    items, load_summary = load_items(args.benchmark, args.questions, args.data_root, args.corpus)
    embedder = build_embedder(cfg.embedding)
    with open_index(args.index, cfg) as index:
        inputs = index_inputs(
            index,
            embedder,
            items,
            gcfg,
            feature_embedder=feature_embedder_for(gcfg, embedder),
            load_summary=load_summary,
            progress=_log,
        )
    prepared = time.perf_counter() - started
    _log(f"training on {gcfg.workers} Ray Train worker(s)")
    t0 = time.perf_counter()
    final, checkpoint = fit_on_ray(inputs, gcfg, output, gcfg.workers, cfg)
    result = _result_from_checkpoint(checkpoint, inputs, gcfg, final)
    summary = export_policy(
        result,
        inputs,
        output,
        extra={
            "index": args.index,
            "workers": gcfg.workers,
            "prepare_seconds": round(prepared, 1),
            "train_seconds": round(time.perf_counter() - t0, 1),
            "config": args.config,
            "overrides": list(args.overrides),
        },
    )
    return summary


def format_train(s: dict[str, Any]) -> str:
    lines = [
        f"{s['status']}: {s['message'] or 'trained ' + str(s['epochs_run']) + ' epoch(s)'}",
        f"  policy {s.get('policy') or '(none: no good epoch)'}  best epoch {s['best_epoch']}  "
        f"dev Hit@1 {s['best_dev_hit@1']:.4f}  epochs run {s['epochs_run']}",
        f"  questions: train {s.get('train_questions')}, dev {s.get('dev_questions')}, "
        f"test {s.get('test_questions')}"
        f"; skipped {s.get('examples', {}).get('skipped_by_reason')}",
        f"  plot {s.get('plot')}",
    ]
    last = s["history"][-1] if s.get("history") else None
    if last:
        lines.append(
            f"  last epoch: loss {last['loss']}, {last['transitions_per_s']} transitions/s on "
            f"{last['workers']} worker(s)"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- evaluate


def run_evaluate(args: argparse.Namespace) -> dict[str, Any]:
    cfg = load_query_config(args.index, args.config, args.overrides)
    gcfg = cfg.graphflow
    items, load_summary = load_items(args.benchmark, args.questions, args.data_root, args.corpus)
    embedder = build_embedder(cfg.embedding)
    with open_index(args.index, cfg) as index:
        retriever = GraphFlowRetriever.open(
            index, embedder, args.policy, gcfg, feature_embedder=feature_embedder_for(gcfg, embedder)
        )
        policy = retriever.policy
        train_cfg: GraphFlowConfig = policy.train_cfg
        kind: TargetKind = "passages" if policy.meta.kind == "passages" else "kgqa"
        examples = build_examples(items, policy.features.graph, retriever.linker, kind, keep_unlinked=True)
    parts = dict(
        zip(
            ("train", "dev", "test"),
            split_examples(examples.examples, train_cfg.dev_fraction, train_cfg.test_fraction, train_cfg.seed),
        )
    )
    chosen = examples.examples if args.split == "all" else parts[args.split]
    if args.limit:
        chosen = chosen[: args.limit]
    vec = question_vectors(
        retriever.feature_embedder, chosen, policy.encoder is not None, policy.train_cfg.question_segments
    )
    result = evaluate_policy(
        policy,
        chosen,
        vec.policy,
        vec.plain,
        mode=gcfg.inference,
        width=gcfg.trajectories,
        min_prob=gcfg.beam_min_prob,
        exclude_starts=gcfg.exclude_starts,
        ranking=gcfg.ranking,
        merge=gcfg.beam_merge,
        progress=_log,
    )
    summary = {
        "policy": args.policy,
        "index": args.index,
        "split": args.split,
        "inference": gcfg.inference,
        "trajectories": gcfg.trajectories,
        **result.to_dict(),
        "load": load_summary,
        "examples": examples.summary(),
    }
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    return summary


def format_evaluate(s: dict[str, Any]) -> str:
    lines = [
        f"{s['n']} {s['split']} questions, {s['inference']} M={s['trajectories']}: "
        + ", ".join(f"{k} {v:.4f}" for k, v in s["metrics"].items())
    ]
    for hop, m in s.get("by_hops", {}).items():
        lines.append(f"  {hop} ({m['n']}): " + ", ".join(f"{k} {v:.4f}" for k, v in m.items() if k != "n"))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- CLI


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", default=None, help="YAML config (default: the config the index was built with, from its manifest)"
    )
    p.add_argument("--index", required=True, help="index folder or s3:// URI")
    p.add_argument(
        "--benchmark",
        default="generic",
        help="loader of the questions: metaqa-1hop|2hop|3hop (MetaQA's question TAB answers format), "
        "hotpotqa, generic (JSONL with gold_passages), ...",
    )
    p.add_argument(
        "--questions",
        action="append",
        default=[],
        metavar="FILE",
        help="questions file (repeatable; default: the benchmark's own)",
    )
    p.add_argument("--corpus", default=None, help="corpus file, for loaders that check gold passages against it")
    p.add_argument("--data-root", default=None, help="benchmark data root (default ../shared/data)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")


def build_parser(command: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"hxd2 graphflow {command}", description=__doc__.split("\n\n")[0])
    _common(p)
    if command == "train":
        p.add_argument("--output", required=True, help="policy folder (checkpoints under _ray/)")
        p.add_argument("--workers", type=int, default=None, help="Ray Train workers (default graphflow.workers)")
        p.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            help="show Ray's and Ray Train's logs here instead of writing them to a log file",
        )
    else:
        p.add_argument("--policy", required=True, help="trained policy folder")
        p.add_argument("--split", choices=("test", "dev", "train", "all"), default="test")
        p.add_argument("--limit", type=int, default=None, help="first N questions of the split")
        p.add_argument("--output", default=None, help="write the summary JSON here")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in SUBCOMMANDS:
        print(f"usage: hxd2 graphflow {{{','.join(SUBCOMMANDS)}}} ...  (hxd2 graphflow train --help)", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    command, rest = argv[0], argv[1:]
    args = build_parser(command).parse_args(rest)

    if command == "train":
        if args.workers is not None and args.workers < 1:
            print("error: --workers must be at least 1", file=sys.stderr)
            return 2
        holder: dict[str, Any] = {}

        def work() -> dict[str, Any]:
            holder["summary"] = run_train(args)
            return holder["summary"]

        from jobs.console import log_path_for, run_job

        # Ray's and Ray Train's lines (worker output, the controller's, teardown noise) go to the log file.
        code = run_job(
            work,
            command="graphflow train",
            log_path=log_path_for("graphflow-train", args.output),
            verbose=args.verbose,
            as_json=args.json,
            format_text=format_train,
            errors=_EXPECTED,
        )
        if code == 0 and holder["summary"]["status"] == "nan_loss":
            return 3
        return code
    return run_and_report(lambda: run_evaluate(args), as_json=args.json, format_text=format_evaluate, errors=_EXPECTED)


if __name__ == "__main__":
    sys.exit(main())
