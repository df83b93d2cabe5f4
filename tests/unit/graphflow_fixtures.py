"""A GraphFlow policy trained on the MetaQA slice of tests/data/eval/metaqa (real Kùzu, Faiss, hashing vectors),
shared by the policy and the wiring tests: trained once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from hxd2_ray.config import GraphFlowConfig, HxdConfig
from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.evaluation.datasets import EvalItem
from hxd2_ray.graphflow.dataset import index_inputs
from hxd2_ray.graphflow.trainer import TrainingInputs, export_policy, train_policy
from hxd2_ray.indexer.kb_index import build_kb_index
from hxd2_ray.logic.metaqa import read_triples
from hxd2_ray.retrieval import open_index
from tests.unit.test_graphflow_data import DIM, KB, kb_config

# Small batches: detailed balance learns by optimiser steps more than by samples per step (41 questions, 8 epochs).
TRAIN = dict(
    hidden_dim=32,
    max_steps=2,
    batch_questions=2,
    learning_rate=5e-3,
    trajectories=16,
    torch_threads=1,
    dev_fraction=0.0,
    test_fraction=0.0,
    epochs=8,
    patience=8,
    max_dev_questions=50,
)

KbPolicy = tuple[Path, HxdConfig, GraphFlowConfig, TrainingInputs]
_TRAINED: dict[int, KbPolicy] = {}  # by tmp_path_factory, i.e. one per session


def kb_questions() -> list[EvalItem]:
    """Who directed / what did X direct, from the slice's own triples."""
    items = []
    by_director: dict[str, list[str]] = {}
    for t in read_triples(KB):
        if t.relation == "directed_by":
            items.append(
                EvalItem(
                    f"d{len(items)}",
                    f"who directed {t.subject}",
                    (t.object,),
                    task="kgqa",
                    meta={"question_marked": f"who directed [{t.subject}]", "hops": 1},
                )
            )
            by_director.setdefault(t.object, []).append(t.subject)
    for person, films in by_director.items():
        items.append(
            EvalItem(
                f"f{len(items)}",
                f"which films did {person} direct",
                tuple(films),
                task="kgqa",
                meta={"question_marked": f"which films did [{person}] direct", "hops": 1},
            )
        )
    return items


def trained_kb_policy(tmp_path_factory: pytest.TempPathFactory) -> KbPolicy:
    """(root, cfg, gcfg, inputs): index ``root/a`` (the whole slice) with the policy ``root/policy`` trained on it,
    and index ``root/b`` (a 30-entity subset)."""
    key = id(tmp_path_factory)
    if key not in _TRAINED:
        _TRAINED[key] = _train(tmp_path_factory.mktemp("gf_policy"))
    return _TRAINED[key]


def _train(root: Path) -> KbPolicy:
    cfg = kb_config()
    build_kb_index(cfg, KB, root / "a", progress=None, batch_size=64)
    build_kb_index(cfg, KB, root / "b", progress=None, batch_size=64, limit_entities=30)
    gcfg = GraphFlowConfig(**TRAIN, cache_dir=str(root / "cache"))
    emb = HashingEmbedder(dim=DIM)
    with open_index(root / "a", cfg) as index:
        inputs = index_inputs(index, emb, kb_questions(), gcfg, progress=None)
    result = train_policy(inputs, gcfg, root / "policy", progress=None)
    export_policy(result, inputs, root / "policy")
    return root, cfg, gcfg, inputs
