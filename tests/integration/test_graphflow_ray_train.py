"""``hxd2 graphflow train`` on Ray Train with two workers (real local Ray, TorchTrainer, gloo), on a real KB index
(the MetaQA slice, Kùzu + Faiss), then ``hxd2 graphflow evaluate`` on the policy it wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hxd2_ray.indexer.kb_index import build_kb_index
from hxd2_ray.logic.metaqa import read_triples
from tests.unit.test_graphflow_data import KB, kb_config

pytestmark = pytest.mark.integration


def write_questions(path: Path) -> None:
    """MetaQA's own format (question TAB answer1|answer2), generated from the slice's triples."""
    lines = []
    films: dict[str, list[str]] = {}
    for t in read_triples(KB):
        if t.relation == "directed_by":
            lines.append(f"who directed [{t.subject}]\t{t.object}")
            films.setdefault(t.object, []).append(t.subject)
        elif t.relation == "release_year":
            lines.append(f"when was [{t.subject}] released\t{t.object}")
    lines += [f"which films did [{p}] direct\t{'|'.join(fs)}" for p, fs in films.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_two_worker_training_then_evaluation(tmp_path, ray_local, capfd):
    from jobs import graphflow

    index = tmp_path / "index"
    build_kb_index(kb_config(), KB, index, progress=None, batch_size=64)
    questions = tmp_path / "1-hop" / "qa_dev.txt"
    questions.parent.mkdir()
    write_questions(questions)
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                **json.loads(kb_config().model_dump_json(include={"embedding", "vectors"})),
                "ray": {"num_cpus": 2},
                "graphflow": {
                    "hidden_dim": 32,
                    "max_steps": 2,
                    "batch_questions": 8,
                    "epochs": 2,
                    "patience": 5,
                    "learning_rate": 0.005,
                    "trajectories": 16,
                    "cache_dir": str(tmp_path / "cache"),
                    "dev_fraction": 0.2,
                    "test_fraction": 0.2,
                },
            }
        ),
        encoding="utf-8",
    )
    policy = tmp_path / "policy"
    code = graphflow.main(
        [
            "train",
            "--config",
            str(config),
            "--index",
            str(index),
            "--benchmark",
            "metaqa-1hop",
            "--questions",
            str(questions),
            "--output",
            str(policy),
            "--workers",
            "2",
            "--json",
        ]
    )
    out = capfd.readouterr()
    assert code == 0, out.err[-3000:]
    summary = json.loads(out.out)
    # Rank 0's progress is relayed to the driver and printed there once per line (a worker's own prints came
    # twice). Ray's forwarded worker lines reach this test's stderr anyway: in-process, Ray writes them to the
    # capture's sys.stderr, not to file descriptor 2, which the command points at its log file.
    for epoch in (1, 2):
        assert out.err.count(f"graphflow: epoch {epoch}: loss") == 1, out.err
    assert list((policy / "_logs").glob("graphflow-train-*.log"))
    assert summary["status"] == "completed" and summary["epochs_run"] == 2 and summary["workers"] == 2
    assert [h["workers"] for h in summary["history"]] == [2, 2]
    assert all(h["transitions"] > 0 and h["loss"] > 0 for h in summary["history"])
    assert (policy / "policy.json").exists() and (policy / "training.png").exists()
    assert any((policy / "_ray").rglob("state.pt"))  # checkpoints went through Ray Train's storage

    code = graphflow.main(
        [
            "evaluate",
            "--config",
            str(config),
            "--index",
            str(index),
            "--policy",
            str(policy),
            "--benchmark",
            "metaqa-1hop",
            "--questions",
            str(questions),
            "--split",
            "test",
            "--json",
        ]
    )
    out = capfd.readouterr()
    assert code == 0, out.err[-3000:]
    report = json.loads(out.out)
    assert report["n"] == summary["test_questions"] > 0
    assert set(report["metrics"]) >= {"hit@1", "hit@5", "mrr", "recall@20", "diverse_recall@20"}
    assert report["by_hops"]["1-hop"]["n"] == report["n"]
