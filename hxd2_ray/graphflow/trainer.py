"""The GraphFlow training loop: plain torch, seeded, data-parallel through a small hook object.

One loop serves a single process (:class:`LocalRun`, checkpoints under ``<output>/checkpoints``) and each Ray
Train worker (``jobs/graphflow.py`` passes hooks that average gradients over the workers and report checkpoints to
Ray). Per epoch: the training questions in a permutation fixed by (seed, epoch), cut into global batches of
``workers x batch_questions``, each worker taking its slice; per batch, the positive demonstrations (drawn from
pools of shortest paths computed once, :func:`prepare_inputs`), on-policy trajectories (``db``), k local
alternatives per state, the loss (:mod:`hxd2_ray.graphflow.objective`), a clipped Adam step. After each epoch:
Hit@1 on (a seeded subset of) the dev questions, a checkpoint, early stopping after ``patience`` epochs without
a better dev Hit@1; the policy exported is the best epoch's.

Every random draw comes from generators seeded by (seed, epoch, worker), so a run is reproducible and a run
resumed from a checkpoint continues exactly as the uninterrupted one. A loss that is not finite (on any worker)
stops training: nothing of that epoch is saved, the last good checkpoint stays, the exported policy is its best.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence

import numpy as np
import torch  # noqa: TID253 - a torch module: imported only by code that trains or walks

from hxd2_ray.config import GraphFlowConfig
from hxd2_ray.errors import HxdError
from hxd2_ray.graphflow.evaluation import evaluate_policy
from hxd2_ray.graphflow.objective import trajectory_loss
from hxd2_ray.graphflow.policy import GraphFlowPolicy, build_policy, save_policy
from hxd2_ray.graphflow.training_inputs import (
    Progress,
    SplitVectors,
    TrainingInputs,
    prepare_inputs,
    say_progress,
)
from hxd2_ray.graphflow.trajectories import Trajectory, local_candidates, sample_on_policy

__all__ = ["LocalRun", "TrainingInputs", "TrainingResult", "prepare_inputs", "train_policy"]

PROGRESS_EVERY = 25  # optimiser steps between progress lines
CHECKPOINT_STATE = "state.pt"


# ------------------------------------------------------------------------------------------------ hooks


class RunHooks(Protocol):
    """What differs between one process and a Ray Train worker."""

    rank: int
    world_size: int

    def average_gradients(self, params: Sequence[torch.nn.Parameter]) -> None: ...

    def sum(self, values: np.ndarray) -> np.ndarray: ...

    def latest_checkpoint(self) -> contextlib.AbstractContextManager[Path | None]: ...

    def save_checkpoint(self, epoch: int, write: Callable[[Path], None], metrics: dict[str, Any]) -> None: ...


class LocalRun:
    """One process; checkpoints ``<output>/checkpoints/epoch-NNNN`` (temp folder + rename; the newest
    ``keep`` kept)."""

    rank = 0
    world_size = 1

    def __init__(self, output_dir: str | os.PathLike[str], keep: int = 2):
        self.folder = Path(output_dir) / "checkpoints"
        self.keep = keep

    def average_gradients(self, params: Sequence[torch.nn.Parameter]) -> None:
        return None

    def sum(self, values: np.ndarray) -> np.ndarray:
        return values

    def _complete(self) -> list[Path]:
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.glob("epoch-*") if (p / CHECKPOINT_STATE).exists())

    @contextlib.contextmanager
    def latest_checkpoint(self) -> Iterator[Path | None]:
        done = self._complete()
        yield done[-1] if done else None

    def save_checkpoint(self, epoch: int, write: Callable[[Path], None], metrics: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".tmp-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            write(tmp)
            os.replace(tmp, self.folder / f"epoch-{epoch:04d}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for old in self._complete()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ loop


@dataclass
class TrainingResult:
    status: str  # completed | early_stopped | nan_loss
    message: str
    epochs_run: int
    best_epoch: int
    best_dev_hit1: float
    history: list[dict[str, Any]]
    best_state: dict[str, Any] | None
    policy: GraphFlowPolicy
    resumed_from_epoch: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "message": self.message,
            "epochs_run": self.epochs_run,
            "best_epoch": self.best_epoch,
            "best_dev_hit@1": self.best_dev_hit1,
            "resumed_from_epoch": self.resumed_from_epoch,
            "history": self.history,
        }


def _seed_all(*parts: int) -> np.random.Generator:
    seq = np.random.SeedSequence([abs(int(p)) for p in parts])
    torch.manual_seed(int(seq.generate_state(1)[0]))
    return np.random.default_rng(seq)


def _slice(vectors: SplitVectors, idx: np.ndarray) -> SplitVectors:
    return SplitVectors(vectors.policy[idx] if vectors.policy is not None else None, vectors.plain[idx])


def _batch_trajectories(
    policy: GraphFlowPolicy,
    inputs: TrainingInputs,
    idx: np.ndarray,
    qh: torch.Tensor,
    qfull: torch.Tensor,
    cfg: GraphFlowConfig,
    rng: np.random.Generator,
) -> list[Trajectory]:
    g = policy.features.graph
    trajs: list[Trajectory] = []
    for row, i in enumerate(idx):
        pool = inputs.demos[i]
        for pick in rng.integers(len(pool), size=cfg.demos_per_question) if pool else ():
            start, actions = pool[int(pick)]
            nodes = [start] + [int(g.target[a]) for a in actions if a >= 0]
            trajs.append(Trajectory(question=row, nodes=nodes, actions=list(actions), kind="demo", hit=True))
    if cfg.objective == "db" and cfg.onpolicy_per_question:
        q_rows = np.repeat(np.arange(len(idx)), cfg.onpolicy_per_question)
        starts = np.array(
            [inputs.train[idx[r]].starts[int(rng.integers(len(inputs.train[idx[r]].starts)))] for r in q_rows],
            dtype=np.int64,
        )
        targets = [inputs.train[i].targets for i in idx]
        trajs += sample_on_policy(
            policy.model,
            policy.tables,
            qh.detach(),
            qfull,
            q_rows,
            starts,
            targets,
            cfg.max_steps,
            cfg.onpolicy_epsilon,
            rng,
            g,
            cfg.onpolicy_max_actions,
            cfg.return_to_start,
        )
    return trajs


def scheduled_rate(cfg: GraphFlowConfig, step: int, total_steps: int) -> float:
    """The share of each parameter group's base rate at optimiser step ``step`` (0-based) of ``total_steps``: a
    function of the step alone, so a resumed run continues the same curve (its epochs are the run's own)."""
    if cfg.lr_schedule == "constant" or total_steps <= 1:
        return 1.0
    progress = min(step / (total_steps - 1), 1.0)
    return cfg.lr_min_ratio + (1.0 - cfg.lr_min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _steps_per_epoch(n: int, world: int, batch: int) -> int:
    full = n // (world * batch)
    return full + (1 if n - full * world * batch >= world else 0)


def train_policy(
    inputs: TrainingInputs,
    cfg: GraphFlowConfig,
    output_dir: str | os.PathLike[str],
    *,
    hooks: RunHooks | None = None,
    device: str = "cpu",
    progress: Progress | None = say_progress,
    clock: Callable[[], float] = time.perf_counter,
    on_epoch_end: Callable[[int, GraphFlowPolicy], None] | None = None,
) -> TrainingResult:
    """Train (or resume) a policy; returns the result with the best state. Writes nothing but checkpoints:
    :func:`export_policy` writes the policy folder."""
    say = progress or (lambda _m: None)
    hooks = hooks or LocalRun(output_dir, cfg.keep_checkpoints)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    if not inputs.train:
        raise HxdError("no training question has a target within reach of its start nodes; nothing to train on")
    policy = build_policy(inputs.features, cfg, inputs.kind, inputs.index_fingerprint, device)
    flow_params = {id(p) for p in policy.model.flow.parameters()}
    optimizer = torch.optim.Adam(
        [
            {"params": [p for p in policy.parameters() if id(p) not in flow_params]},
            {"params": list(policy.model.flow.parameters()), "lr": cfg.learning_rate * cfg.flow_lr_scale},
        ],
        lr=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
    )
    base_rates = [group["lr"] for group in optimizer.param_groups]
    history: list[dict[str, Any]] = []
    best: dict[str, Any] = {"score": -1.0, "epoch": 0, "state": None}
    bad_epochs = 0
    start_epoch = 0
    with hooks.latest_checkpoint() as ckpt:
        if ckpt is not None:
            state = torch.load(ckpt / CHECKPOINT_STATE, map_location=device, weights_only=False)
            if state["fingerprint"] != policy.meta.fingerprint:
                raise HxdError(
                    f"the checkpoint at {ckpt} belongs to another index or training configuration "
                    f"(fingerprint {state['fingerprint']}, this run {policy.meta.fingerprint}); use a "
                    "new --output or the same settings"
                )
            policy.load_state_dict(state["policy"])
            optimizer.load_state_dict(state["optimizer"])
            history, best = state["history"], state["best"]
            bad_epochs, start_epoch = state["bad_epochs"], state["epoch"]
            say(f"resumed from {ckpt.name}: epoch {start_epoch}, best dev Hit@1 {best['score']:.4f}")
    resumed_from = start_epoch
    n_train = len(inputs.train)
    dev_idx = np.arange(len(inputs.dev))
    if len(dev_idx) > cfg.max_dev_questions:
        dev_idx = np.sort(
            np.random.default_rng([cfg.seed, 11]).choice(len(dev_idx), cfg.max_dev_questions, replace=False)
        )
    steps = _steps_per_epoch(n_train, hooks.world_size, cfg.batch_questions)
    status, message = "completed", f"trained {cfg.epochs} epochs"
    if bad_epochs >= cfg.patience:
        status, message = "early_stopped", f"early stopping had ended this run after epoch {start_epoch}"
    for epoch in range(start_epoch + 1, cfg.epochs + 1):
        if bad_epochs >= cfg.patience:
            break
        policy.model.train()
        order = np.random.default_rng([cfg.seed, epoch]).permutation(n_train)
        rng = _seed_all(cfg.seed, epoch, hooks.rank)
        t0 = clock()
        sums = np.zeros(7)  # loss*states, states, transitions, policy trajectories, policy hits, taken_best, demo
        nan_at = None
        for step in range(steps):
            glob = order[
                step * hooks.world_size * cfg.batch_questions : (step + 1) * hooks.world_size * cfg.batch_questions
            ]
            idx = glob[hooks.rank :: hooks.world_size]
            vec = _slice(inputs.vectors["train"], idx)
            pv = torch.as_tensor(vec.policy, device=device) if vec.policy is not None else None
            qh, qfull = policy.question_tables(
                pv, [inputs.train[i].policy_text for i in idx], torch.as_tensor(vec.plain, device=device)
            )
            trajs = _batch_trajectories(policy, inputs, idx, qh, qfull, cfg, rng)
            cands = [
                local_candidates(inputs.features.graph, t, cfg.explore_k, cfg.explore_stop, rng, cfg.return_to_start)
                for t in trajs
            ]
            loss, stats = trajectory_loss(
                policy.model,
                policy.tables,
                qh,
                qfull,
                trajs,
                cands,
                [inputs.train[i].targets for i in idx],
                objective=cfg.objective,
                miss_log_reward=cfg.miss_log_reward,
                max_steps=cfg.max_steps,
                move_log_cost=cfg.move_log_cost,
            )
            finite = hooks.sum(np.array([0.0 if torch.isfinite(loss) else 1.0]))[0] == 0
            if not finite:
                nan_at = step
                break
            share = scheduled_rate(cfg, (epoch - 1) * steps + step, cfg.epochs * steps)
            for group, base in zip(optimizer.param_groups, base_rates):
                group["lr"] = base * share
            optimizer.zero_grad(set_to_none=False)
            loss.backward()
            hooks.average_gradients(policy.parameters())
            torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip)
            optimizer.step()
            on_policy = [t for t in trajs if t.kind == "policy"]
            sums += [
                float(loss.detach()) * stats.states,
                stats.states,
                stats.transitions,
                len(on_policy),
                sum(t.hit for t in on_policy),
                stats.taken_best,
                stats.demo_states,
            ]
            if (step + 1) % PROGRESS_EVERY == 0 and step + 1 < steps:
                elapsed = clock() - t0
                left = elapsed / (step + 1) * (steps - step - 1)
                say(
                    f"epoch {epoch}: step {step + 1}/{steps}, loss {sums[0] / max(sums[1], 1):.4f}, "
                    f"{sums[2] / elapsed:,.0f} transitions/s on this worker, ~{left:.0f}s left in the epoch"
                )
        train_seconds = clock() - t0
        if nan_at is not None:
            status = "nan_loss"
            message = (
                f"the loss is not finite at epoch {epoch}, step {nan_at + 1} of {steps}: training stopped; "
                f"the last good checkpoint (epoch {epoch - 1}) and its best policy are kept"
            )
            say(message)
            break
        totals = hooks.sum(sums)
        dev_hit1: float | None = None
        if len(dev_idx):
            dev_hit1 = _dev_hit1(policy, inputs, dev_idx, cfg, hooks)
            improved = dev_hit1 > best["score"]
        else:  # no dev questions: nothing to select on, so the latest epoch is the policy and nothing stops early
            improved = True
        if improved:
            best = {"score": dev_hit1 or 0.0, "epoch": epoch, "state": policy.state_dict()}
            bad_epochs = 0
        else:
            bad_epochs += 1
        seconds = hooks.sum(np.array([train_seconds]))[0] / hooks.world_size
        row = {
            "epoch": epoch,
            "loss": round(totals[0] / max(totals[1], 1), 5),
            "states": int(totals[1]),
            "transitions": int(totals[2]),
            "train_seconds": round(seconds, 3),
            "transitions_per_s": round(totals[2] / seconds, 1) if seconds > 0 else None,
            "onpolicy_hit_rate": round(totals[4] / totals[3], 4) if totals[3] else None,
            "demo_taken_best": round(totals[5] / totals[6], 4) if totals[6] else None,
            "dev_hit@1": round(dev_hit1, 4) if dev_hit1 is not None else None,
            "workers": hooks.world_size,
            "learning_rate": round(optimizer.param_groups[0]["lr"], 8),
        }
        history.append(row)
        dev_text = "no dev split" if dev_hit1 is None else f"dev Hit@1 {dev_hit1:.4f}{' (best)' if improved else ''}"
        say(
            f"epoch {epoch}: loss {row['loss']:.4f}, {dev_text}, "
            f"{row['transitions']:,} transitions in {seconds:.1f}s ({row['transitions_per_s']}/s), on-policy hits "
            f"{row['onpolicy_hit_rate']}"
        )
        state = {
            "fingerprint": policy.meta.fingerprint,
            "epoch": epoch,
            "policy": policy.state_dict(),
            "optimizer": optimizer.state_dict(),
            "history": history,
            "best": best,
            "bad_epochs": bad_epochs,
        }
        hooks.save_checkpoint(epoch, lambda folder: torch.save(state, folder / CHECKPOINT_STATE), row)
        if on_epoch_end is not None:
            on_epoch_end(epoch, policy)
        if bad_epochs >= cfg.patience:
            status, message = (
                "early_stopped",
                (
                    f"no better dev Hit@1 for {cfg.patience} epochs: stopped after epoch "
                    f"{epoch}, best epoch {best['epoch']}"
                ),
            )
            say(message)
            break
    return TrainingResult(
        status=status,
        message=message,
        epochs_run=len(history),
        best_epoch=int(best["epoch"]),
        best_dev_hit1=float(best["score"]),
        history=history,
        best_state=best["state"],
        policy=policy,
        resumed_from_epoch=resumed_from,
    )


def _dev_hit1(
    policy: GraphFlowPolicy, inputs: TrainingInputs, dev_idx: np.ndarray, cfg: GraphFlowConfig, hooks: RunHooks
) -> float:
    """Dev Hit@1, the questions shared out over the workers and the sums added up."""
    mine = dev_idx[hooks.rank :: hooks.world_size]
    if len(dev_idx) == 0:
        return 0.0
    vec = _slice(inputs.vectors["dev"], mine)
    result = (
        evaluate_policy(
            policy,
            [inputs.dev[i] for i in mine],
            vec.policy,
            vec.plain,
            mode="beam",
            width=cfg.trajectories,
            seed=cfg.seed,
            exclude_starts=cfg.exclude_starts,
            ranking=cfg.ranking,
            merge=cfg.beam_merge,
        )
        if len(mine)
        else None
    )
    total = hooks.sum(
        np.array([result.metrics.get("hit@1", 0.0) * result.n if result else 0.0, result.n if result else 0.0])
    )
    return float(total[0] / total[1]) if total[1] else 0.0


# ------------------------------------------------------------------------------------------------ export


def export_policy(
    result: TrainingResult,
    inputs: TrainingInputs,
    output_dir: str | os.PathLike[str],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the best state as the policy (``policy.pt`` + ``policy.json``), ``training_summary.json`` and
    ``training.png``; returns the summary. With no good epoch at all (a NaN in the first), no policy is written."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        **result.summary(),
        **inputs.summary,
        **(extra or {}),
        "kind": inputs.kind,
        "policy_fingerprint": result.policy.meta.fingerprint,
    }
    if result.best_state is not None:
        save_policy(
            result.policy, out, state=result.best_state, summary={k: v for k, v in summary.items() if k != "history"}
        )
        summary["policy"] = str(out)
    else:
        summary["policy"] = None
    summary["plot"] = plot_training(result.history, out / "training.png")
    (out / "training_summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    return summary


def plot_training(history: Sequence[dict[str, Any]], path: Path) -> str | None:
    if not history:
        return None
    import matplotlib  # noqa: PLC0415 - plotting only at the end of a run

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    epochs = [h["epoch"] for h in history]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax1.plot(epochs, [h["loss"] for h in history], marker="o")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("training loss (mean per state)")
    ax1.set_yscale("log")
    ax1.set_title("loss")
    if any(h.get("dev_hit@1") is not None for h in history):
        ax2.plot(epochs, [h.get("dev_hit@1") or 0 for h in history], marker="o", label="dev Hit@1")
    if any(h.get("onpolicy_hit_rate") is not None for h in history):
        ax2.plot(epochs, [h.get("onpolicy_hit_rate") or 0 for h in history], marker=".", label="on-policy hit rate")
    if any(h.get("demo_taken_best") is not None for h in history):
        ax2.plot(
            epochs,
            [h.get("demo_taken_best") or 0 for h in history],
            marker="x",
            label="demo action ranked first (local)",
        )
    ax2.set_ylim(0, 1.02)
    ax2.set_xlabel("epoch")
    ax2.set_title("accuracy")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)
