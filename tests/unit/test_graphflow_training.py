"""The GraphFlow training loop on a generated movie graph: it learns (>= 0.9 of the held-out targets), a seed
fixes the run, a run resumed from its checkpoint ends where the uninterrupted one does, a non-finite loss stops
training and keeps the last good checkpoint; and the two objectives on a task built to need exploration."""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pytest
import torch

from hxd2_ray.config import GraphFlowConfig
from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.graphflow.evaluation import evaluate_policy
from hxd2_ray.graphflow.examples import build_examples, split_examples
from hxd2_ray.graphflow.features import build_features
from hxd2_ray.graphflow.linking import StartLinker
from hxd2_ray.graphflow.policy import load_policy
from hxd2_ray.graphflow.synthetic import movie_world
from hxd2_ray.graphflow.trainer import TrainingInputs, export_policy, prepare_inputs, train_policy

DIM = 32
QUICK = dict(hidden_dim=32, max_steps=2, batch_questions=2, learning_rate=5e-3, trajectories=16, torch_threads=1)


@lru_cache(maxsize=4)
def world_inputs(n_movies: int, n_people: int, seed: int = 1, kinds: tuple[str, ...] | None = None) -> TrainingInputs:
    world = movie_world(n_movies=n_movies, n_people=n_people, seed=seed, kinds=kinds)
    emb = HashingEmbedder(dim=DIM)
    feats = build_features(world.graph, emb, world.node_texts, progress=None)
    examples = build_examples(world.questions, world.graph, StartLinker(world.graph))
    train, dev, test = split_examples(examples.examples, 0.15, 0.25, seed=0)
    cfg = GraphFlowConfig(**QUICK)
    return prepare_inputs(feats, emb, train, dev, test, cfg, "kgqa", f"synthetic-{seed}", progress=None)


def history_without_timings(history):
    return [{k: v for k, v in h.items() if k not in ("train_seconds", "transitions_per_s")} for h in history]


def same_state(a, b) -> bool:
    return all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_training_reaches_the_held_out_targets(tmp_path):
    inputs = world_inputs(40, 20)
    cfg = GraphFlowConfig(**{**QUICK, "learning_rate": 1e-2}, epochs=10, patience=10)  # cosine-decayed to 5e-4
    result = train_policy(inputs, cfg, tmp_path, progress=None)
    result.policy.load_state_dict(result.best_state)
    vec = inputs.vectors["test"]
    scores = evaluate_policy(result.policy, inputs.test, vec.policy, vec.plain, mode="beam", width=16)
    assert scores.n == len(inputs.test) >= 25
    assert scores.metrics["ranked_recall@20"] >= 0.9
    assert scores.metrics["hit@1"] >= 0.9
    assert scores.metrics["diverse_recall@20"] >= 0.95 * scores.metrics["recall@20"]
    assert result.history[-1]["onpolicy_hit_rate"] > result.history[0]["onpolicy_hit_rate"]


def test_a_seed_fixes_the_run(tmp_path):
    inputs = world_inputs(16, 10)
    cfg = GraphFlowConfig(**QUICK, epochs=2, patience=5)
    a = train_policy(inputs, cfg, tmp_path / "a", progress=None)
    b = train_policy(inputs, cfg, tmp_path / "b", progress=None)
    assert history_without_timings(a.history) == history_without_timings(b.history)
    assert same_state(a.policy.state_dict(), b.policy.state_dict())
    c = train_policy(inputs, cfg.model_copy(update={"seed": 5}), tmp_path / "c", progress=None)
    assert history_without_timings(c.history) != history_without_timings(a.history)


def test_a_resumed_run_ends_where_the_uninterrupted_one_does(tmp_path):
    inputs = world_inputs(16, 10)
    cfg = GraphFlowConfig(**QUICK, epochs=3, patience=5)
    assert cfg.lr_schedule == "cosine"
    straight = train_policy(inputs, cfg, tmp_path / "straight", progress=None)

    def crash_after_two(epoch, policy):
        if epoch == 2:
            raise RuntimeError("killed after epoch 2")

    with pytest.raises(RuntimeError, match="killed after epoch 2"):
        train_policy(inputs, cfg, tmp_path / "resumed", progress=None, on_epoch_end=crash_after_two)
    assert [p.name for p in sorted((tmp_path / "resumed" / "checkpoints").iterdir())] == ["epoch-0001", "epoch-0002"]
    resumed = train_policy(inputs, cfg, tmp_path / "resumed", progress=None)
    assert resumed.resumed_from_epoch == 2 and len(resumed.history) == 3
    # the schedule is a function of the step: the resumed epoch 3 runs at the rates the straight run's did
    assert history_without_timings(resumed.history) == history_without_timings(straight.history)
    rates = [h["learning_rate"] for h in straight.history]
    assert rates[0] > rates[1] > rates[2] == pytest.approx(cfg.learning_rate * cfg.lr_min_ratio)
    assert same_state(resumed.policy.state_dict(), straight.policy.state_dict())
    # keep_checkpoints=2: the oldest is gone
    assert [p.name for p in sorted((tmp_path / "resumed" / "checkpoints").iterdir())] == ["epoch-0002", "epoch-0003"]
    # a checkpoint of another configuration is not resumed
    with pytest.raises(Exception, match="another index or training configuration"):
        train_policy(
            inputs, cfg.model_copy(update={"hidden_dim": 16, "epochs": 4}), tmp_path / "resumed", progress=None
        )


def test_the_cosine_schedule_falls_from_the_rate_to_its_floor_and_constant_stays():
    from hxd2_ray.graphflow.trainer import scheduled_rate

    cfg = GraphFlowConfig(lr_min_ratio=0.1)
    assert scheduled_rate(cfg, 0, 101) == 1.0
    assert scheduled_rate(cfg, 50, 101) == pytest.approx(0.1 + 0.9 * 0.5)
    assert scheduled_rate(cfg, 100, 101) == pytest.approx(0.1)
    shares = [scheduled_rate(cfg, s, 101) for s in range(101)]
    assert all(a >= b for a, b in zip(shares, shares[1:]))
    flat = cfg.model_copy(update={"lr_schedule": "constant"})
    assert {scheduled_rate(flat, s, 101) for s in range(101)} == {1.0}


def test_a_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path):
    inputs = world_inputs(16, 10)
    cfg = GraphFlowConfig(**QUICK, epochs=4, patience=5)
    messages: list[str] = []

    def poison(epoch, policy):
        if epoch == 1:
            with torch.no_grad():
                for p in policy.model.flow.parameters():
                    p.fill_(float("nan"))

    result = train_policy(inputs, cfg, tmp_path, progress=messages.append, on_epoch_end=poison)
    assert result.status == "nan_loss" and "epoch 2" in result.message and "last good checkpoint" in result.message
    assert any("not finite" in m for m in messages)
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["epoch-0001"]
    assert result.epochs_run == 1 and result.best_epoch == 1
    summary = export_policy(result, inputs, tmp_path / "policy")
    assert summary["status"] == "nan_loss" and summary["policy"]
    policy = load_policy(tmp_path / "policy", inputs.features, inputs.index_fingerprint)
    assert all(torch.isfinite(p).all() for p in policy.model.parameters())
    saved = json.loads((tmp_path / "policy" / "training_summary.json").read_text())
    assert saved["status"] == "nan_loss" and (tmp_path / "policy" / "training.png").exists()


def test_reward_alone_teaches_db_what_behaviour_cloning_cannot_see(tmp_path):
    """The task built to need exploration: one question kind comes with no positive trajectory (only its reward),
    as when no demonstration is known. SFT only imitates, so it never learns that kind; detailed balance samples
    its own trajectories and learns it from the reward."""
    inputs = world_inputs(40, 20)
    hidden = "director_to_movie_to_genre"
    kinds = {q.id: q.meta["qtype"] for q in movie_world(n_movies=40, n_people=20, seed=1).questions}
    demos = [[] if kinds[e.id] == hidden else pool for e, pool in zip(inputs.train, inputs.demos)]
    withheld = TrainingInputs(**{**inputs.__dict__, "demos": demos})
    test = [i for i, e in enumerate(inputs.test) if kinds[e.id] == hidden]
    assert len(test) >= 5
    vec = inputs.vectors["test"]
    hit1 = {}
    for objective in ("sft", "db"):
        cfg = GraphFlowConfig(**QUICK, objective=objective, epochs=10, patience=10)
        result = train_policy(withheld, cfg, tmp_path / objective, progress=None)
        result.policy.load_state_dict(result.best_state)
        hit1[objective] = evaluate_policy(
            result.policy, [inputs.test[i] for i in test], vec.policy[test], vec.plain[test], mode="beam", width=16
        ).metrics["hit@1"]
    assert hit1["db"] >= hit1["sft"] + 0.3, hit1


def test_training_refuses_inputs_without_reachable_targets(tmp_path):
    inputs = world_inputs(16, 10)
    empty = TrainingInputs(**{**inputs.__dict__, "train": [], "demos": []})
    with pytest.raises(Exception, match="nothing to train on"):
        train_policy(empty, GraphFlowConfig(**QUICK), tmp_path, progress=None)


def test_the_demonstration_pools_are_shortest_paths_to_targets():
    inputs = world_inputs(16, 10)
    g = inputs.features.graph
    for ex, pool in zip(inputs.train, inputs.demos):
        assert pool
        for start, actions in pool:
            assert start in ex.starts and actions[-1] == -1
            node = start
            for a in actions[:-1]:
                assert g.ptr[node] <= a < g.ptr[node + 1]
                node = int(g.target[a])
            assert node in ex.targets
    assert np.mean([len(p) for p in inputs.demos]) > 1


def test_chain_demonstrations_teach_each_question_one_relation_chain():
    world = movie_world(n_movies=40, n_people=20, seed=1)
    emb = HashingEmbedder(dim=DIM)
    feats = build_features(world.graph, emb, world.node_texts, progress=None)
    examples = build_examples(world.questions, world.graph, StartLinker(world.graph)).examples
    cfg = GraphFlowConfig(**QUICK, demonstrations="chain")
    inputs = prepare_inputs(feats, emb, examples, [], [], cfg, "kgqa", "synthetic-1", progress=None)
    shortest = world_inputs(40, 20)
    assert inputs.summary["demonstrations"] == "chain" and inputs.summary["chains_taught"]
    assert len(inputs.train) >= 0.9 * len(examples)
    graph = world.graph
    labels = [
        tuple(sorted(graph.signatures[graph.sig[a]]))
        for pool in inputs.demos
        for _, acts in pool
        for a in acts
        if a >= 0
    ]
    assert labels  # demonstrations exist and walk real edges
    for ex, pool in zip(inputs.train, inputs.demos):
        moves = {len(acts) for _, acts in pool}
        assert len(moves) == 1  # one chain: every demonstration has its length
        assert all(graph.target[acts[-2]] in ex.targets for _, acts in pool)  # and ends at an answer
    assert shortest.summary["demonstrations"] == "shortest" and "chains_taught" not in shortest.summary
