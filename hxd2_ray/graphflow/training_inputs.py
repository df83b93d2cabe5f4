"""What GraphFlow trains on: each split's question vectors and, per (question, start), a pool of demonstration
paths from the shortest chains to the answers."""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from hxd2_ray.config import GraphFlowConfig
from hxd2_ray.graphflow.chains import ChainDemonstrations
from hxd2_ray.graphflow.examples import Example
from hxd2_ray.graphflow.features import GraphFeatures, embed_normalized, question_features
from hxd2_ray.graphflow.trajectories import ShortestPaths

Progress = Callable[[str], None]


def say_progress(msg: str) -> None:
    """A progress line on stderr, as a training run prints it."""
    print(f"[graphflow train] {msg}", file=sys.stderr, flush=True)


DEMO_POOL = 16  # shortest paths kept per (question, start)
# ------------------------------------------------------------------------------------------------ inputs


@dataclass
class SplitVectors:
    policy: np.ndarray | None  # [n, dim * (1 + question_segments)] policy-text features (None: LoRA reads texts)
    plain: np.ndarray  # [n, dim]


@dataclass
class TrainingInputs:
    """Everything a worker needs, picklable (the Ray job ``ray.put``s it once): features, split examples, their
    question vectors, and the demonstration pools of the training questions."""

    features: GraphFeatures
    kind: str
    index_fingerprint: str
    train: list[Example]
    dev: list[Example]
    test: list[Example]
    vectors: dict[str, SplitVectors]  # split name -> vectors aligned with its examples
    demos: list[list[tuple[int, list[int]]]]  # train example -> [(start, actions ending in STOP)]
    summary: dict[str, Any] = field(default_factory=dict)


def question_vectors(embedder: Any, examples: Sequence[Example], lora: bool, segments: int = 0) -> SplitVectors:
    """The questions' plain unit vectors and (frozen encoder) the policy's features of their policy texts, with
    ``segments`` word runs (:func:`~hxd2_ray.graphflow.features.question_features`)."""
    if not examples:
        empty = np.zeros((0, embedder.dim), np.float32)
        return SplitVectors(None if lora else np.zeros((0, embedder.dim * (1 + segments)), np.float32), empty)
    plain = embed_normalized(embedder, [e.question for e in examples])
    if lora:
        return SplitVectors(None, plain)
    texts = [e.policy_text for e in examples]
    if segments == 0 and texts == [e.question for e in examples]:
        return SplitVectors(plain, plain)
    return SplitVectors(question_features(embedder, texts, segments), plain)


def prepare_inputs(
    features: GraphFeatures,
    embedder: Any,
    train: Sequence[Example],
    dev: Sequence[Example],
    test: Sequence[Example],
    cfg: GraphFlowConfig,
    kind: str,
    index_fingerprint: str,
    progress: Progress | None = say_progress,
    summary: dict[str, Any] | None = None,
) -> TrainingInputs:
    """Embed the questions and find the demonstrations; training questions with no target within ``max_steps``
    moves of a start node are left out of training (counted) and stay in dev/test, where they score misses."""
    say = progress or (lambda _m: None)
    started = time.perf_counter()
    rng = np.random.default_rng([cfg.seed, 7])
    if cfg.demonstrations == "chain":
        pools, chain_summary = _chain_demonstrations(features.graph, train, cfg, rng, say)
    else:
        paths = ShortestPaths(features.graph, cfg.max_steps)
        pools, chain_summary = [], {}
        for i, ex in enumerate(train):
            pools.append([(s, a) for s in ex.starts for a in paths.sample(s, ex.targets, DEMO_POOL, rng)])
            if (i + 1) % 5000 == 0:
                say(
                    f"demonstrations for {i + 1:,}/{len(train):,} training questions "
                    f"({time.perf_counter() - started:.0f}s)"
                )
    kept: list[Example] = []
    demos: list[list[tuple[int, list[int]]]] = []
    unreachable = 0
    for ex, pool in zip(train, pools):
        if pool:
            kept.append(ex)
            demos.append(pool)
        else:
            unreachable += 1
    lora = cfg.encoder == "lora"
    seg = cfg.question_segments
    vectors = {
        "train": question_vectors(embedder, kept, lora, seg),
        "dev": question_vectors(embedder, dev, lora, seg),
        "test": question_vectors(embedder, test, lora, seg),
    }
    info = dict(summary or {})
    info.update(
        {
            "train_questions": len(kept),
            "dev_questions": len(dev),
            "test_questions": len(test),
            "train_no_target_within_max_steps": unreachable,
            "demonstrations": cfg.demonstrations,
            **chain_summary,
        }
    )
    say(
        f"{len(kept):,} training questions ({unreachable:,} without a target within {cfg.max_steps} moves left "
        f"out), {len(dev):,} dev, {len(test):,} test; prepared in {time.perf_counter() - started:.1f}s"
    )
    return TrainingInputs(
        features=features,
        kind=kind,
        index_fingerprint=index_fingerprint,
        train=kept,
        dev=list(dev),
        test=list(test),
        vectors=vectors,
        demos=demos,
        summary=info,
    )


def _chain_demonstrations(
    graph: Any, train: Sequence[Example], cfg: GraphFlowConfig, rng: np.random.Generator, say: Progress
) -> tuple[list[list[tuple[int, list[int]]]], dict[str, Any]]:
    """Demonstrations along each question's relation chain (:mod:`hxd2_ray.graphflow.chains`), and a summary."""
    started = time.perf_counter()
    chains = ChainDemonstrations(graph, cfg.max_steps, cfg.chain_max_frontier, cfg.return_to_start)
    fits = []
    for i, ex in enumerate(train):
        fits.append(chains.fits(ex.starts, ex.targets))
        if (i + 1) % 5000 == 0:
            say(
                f"relation chains of {i + 1:,}/{len(train):,} training questions ({time.perf_counter() - started:.0f}s)"
            )
    chosen = chains.choose(fits, [ex.policy_text for ex in train])
    pools = [
        []
        if chain is None
        else [(s, a) for s in ex.starts for a in chains.sample(s, chain, ex.targets, DEMO_POOL, rng)]
        for ex, chain in zip(train, chosen)
    ]
    taught = Counter(chains.chain_name(c) for c in chosen if c is not None)
    summary = {
        "chain_not_taught": sum(1 for fit, c in zip(fits, chosen) if fit and c is None),
        "chain_moves": dict(sorted(Counter(len(c) for c in chosen if c is not None).items())),
        "chains_taught": dict(taught.most_common(10)),
        "chain_seconds": round(time.perf_counter() - started, 1),
    }
    say(
        f"relation chains: {len(taught):,} distinct taught; {summary['chain_not_taught']:,} questions whose "
        f"wording's chain misses their answers left out ({summary['chain_seconds']}s)"
    )
    return pools, summary
