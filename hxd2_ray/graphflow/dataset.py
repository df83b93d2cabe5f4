"""From a benchmark's question files and an open index to what training and evaluation read.

:func:`load_items` reads questions with the evaluation job's own loaders (so ``--benchmark metaqa-2hop
--questions FILE`` parses exactly as ``hxd2 eval run`` does, and anything it skips is counted with its reason);
:func:`index_inputs` links start nodes, maps gold answers or passages to target nodes, splits by question
(seeded) and prepares the training inputs.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

from hxd2_ray.config import GraphFlowConfig
from hxd2_ray.evaluation.datasets import EvalItem, get_benchmark
from hxd2_ray.graphflow.examples import build_examples, split_examples, target_kind_of
from hxd2_ray.graphflow.features import load_or_build_features
from hxd2_ray.graphflow.linking import StartLinker
from hxd2_ray.graphflow.training_inputs import TrainingInputs, prepare_inputs

__all__ = ["index_inputs", "load_items"]

Progress = Callable[[str], None]


def _log(msg: str) -> None:
    print(f"[graphflow] {msg}", file=sys.stderr, flush=True)


def load_items(
    benchmark: str, questions: Sequence[str] = (), data_root: str | None = None, corpus: str | None = None
) -> tuple[list[EvalItem], dict[str, Any]]:
    """Items of ``benchmark`` (its default file, or each of ``questions`` in turn) and what the loader skipped."""
    spec = get_benchmark(benchmark)
    files: list[str | None] = list(questions) or [None]
    items: list[EvalItem] = []
    skipped: list[list[str]] = []
    for path in files:
        report = spec.load(data_root, questions=path, corpus=corpus)
        items += report.items
        skipped += [list(s) for s in report.skipped]
    reasons: dict[str, int] = {}
    for _, reason in skipped:
        reasons[reason.split(":")[0]] = reasons.get(reason.split(":")[0], 0) + 1
    return items, {
        "benchmark": spec.name,
        "files": [f for f in files if f],
        "loaded": len(items),
        "loader_skipped": len(skipped),
        "loader_skipped_by_reason": reasons,
        "loader_skipped_examples": skipped[:10],
    }


def index_inputs(
    index: Any,
    embedder: Any,
    items: Sequence[Any],
    cfg: GraphFlowConfig,
    *,
    feature_embedder: Any = None,
    load_summary: dict[str, Any] | None = None,
    progress: Progress | None = _log,
) -> TrainingInputs:
    """:class:`~hxd2_ray.graphflow.trainer.TrainingInputs` for ``items`` over an open index; ``feature_embedder``:
    the features' embedder when it is not the index's (``graphflow.feature_embedding``, built by the caller)."""
    say = progress or (lambda _m: None)
    feature_embedder = feature_embedder or embedder
    features = load_or_build_features(
        index, feature_embedder, cache_dir=cfg.cache_dir, chunk_text_chars=cfg.chunk_text_chars, progress=progress
    )
    linker = StartLinker.for_index(index, features.graph, embedder, cfg)
    kind = target_kind_of(items)
    examples = build_examples(items, features.graph, linker, kind, keep_unlinked=True)
    say(
        f"{len(examples.examples):,} {kind} examples; skipped {len(examples.skipped):,} "
        f"{examples.reasons()}; {examples.unlinked:,} without a start node (misses when evaluated); "
        f"{examples.answers_unknown:,} gold answers not in the index"
    )
    train, dev, test = split_examples(examples.examples, cfg.dev_fraction, cfg.test_fraction, cfg.seed)
    summary = {**(load_summary or {}), "examples": examples.summary()}
    return prepare_inputs(
        features,
        feature_embedder,
        train,
        dev,
        test,
        cfg,
        kind,
        index.manifest.fingerprint,
        progress=progress,
        summary=summary,
    )
