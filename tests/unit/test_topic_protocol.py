"""One evaluation protocol: a question's topic entity travels as a field of the question.

The shipped MetaQA dev sample of the KB slice (MetaQA's own ``question TAB answers`` format, the topic in
brackets) is scored through ``hxd2 eval run --mode graphflow`` (the evaluation library with its in-process shard
runner) and through ``hxd2 graphflow evaluate``; their Hits@1 must agree. The same questions with the topic left to
be linked from the plain text are measured too. Real Kùzu, Faiss, hashing vectors, the policy the policy tests
train."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest
import yaml

from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.evaluation import metrics as M
from hxd2_ray.evaluation.datasets import get_benchmark, load_metaqa
from hxd2_ray.graphflow.linking import mark_topic
from hxd2_ray.graphflow.retriever import GraphFlowRetriever
from hxd2_ray.retrieval import open_index
from hxd2_ray.runs.evaluation import run_evaluation
from hxd2_ray.runs.requests import EvalRunRequest
from hxd2_ray.stages.eval_stage import answer_in_process
from hxd2_ray.stages.eval_traces import load_traces
from tests.unit.graphflow_fixtures import KbPolicy, kb_questions, trained_kb_policy
from tests.unit.test_graphflow_data import DIM

AGREEMENT = 0.005  # the two entry points score one protocol: the same questions, the same starts
LINKED_WITHIN = 0.03  # what a user without brackets gets, beside the bracketed score


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> KbPolicy:
    return trained_kb_policy(tmp_path_factory)


def dev_sample(path: Path) -> Path:
    """The slice's questions in MetaQA's file format, in a ``1-hop`` folder (the loader reads the hops there)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(f"{item.meta['question_marked']}\t{'|'.join(item.answers)}\n" for item in kb_questions()),
        encoding="utf-8",
    )
    return path


def test_the_metaqa_loader_keeps_the_topic_as_a_field(tmp_path: Path) -> None:
    item = load_metaqa(dev_sample(tmp_path / "1-hop" / "qa_dev.txt")).items[0]
    assert item.topic and f"[{item.topic}]" in item.meta["question_marked"]
    assert "[" not in item.question and item.topic in item.question  # the text reads as written, brackets gone
    assert item.to_dict()["topic"] == item.topic


def test_mark_topic_brackets_the_first_mention_whatever_its_case() -> None:
    assert mark_topic("who directed the public eye", "The Public Eye") == "who directed [the public eye]"
    assert mark_topic("who directed [The Public Eye]", "Omagh") == "who directed [The Public Eye]"
    assert mark_topic("how tall is it", "Qinghe 17") == "how tall is it"
    assert mark_topic("how tall is it", None) == "how tall is it"


def test_eval_run_and_graphflow_evaluate_agree_on_metaqa(trained: KbPolicy, tmp_path: Path, capfd: Any) -> None:
    from jobs import graphflow

    root, cfg, _, _ = trained
    questions = dev_sample(tmp_path / "1-hop" / "qa_dev.txt")
    policy = root / "policy"
    cache = f"graphflow.cache_dir={root / 'cache'}"
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                **json.loads(cfg.model_dump_json(include={"embedding", "vectors"})),
                "graphflow": {"cache_dir": str(root / "cache")},
            }
        ),
        encoding="utf-8",
    )
    code = graphflow.main(
        [
            "evaluate",
            "--config",
            str(config),
            "--index",
            str(root / "a"),
            "--policy",
            str(policy),
            "--benchmark",
            "metaqa-1hop",
            "--questions",
            str(questions),
            "--split",
            "all",
            "--json",
        ]
    )
    out = capfd.readouterr()
    assert code == 0, out.err[-3000:]
    walked = json.loads(out.out)

    req = EvalRunRequest(
        benchmark="metaqa-1hop",
        questions=str(questions),
        index=str(root / "a"),
        output=str(tmp_path / "run"),
        modes=("graphflow",),
        policy=str(policy),
        overrides=(cache,),
    )
    summary = run_evaluation(req, answer_in_process)
    evaluated = summary["per_mode"]["graphflow"]
    assert evaluated["n"] == walked["n"] == len(kb_questions())
    assert abs(evaluated["metrics"]["hits@1"] - walked["metrics"]["hit@1"]) <= AGREEMENT, (evaluated, walked)
    traces = load_traces(pafs.LocalFileSystem(), str(tmp_path / "run"))
    assert all(t["path"] == "graphflow" for t in traces)  # every question started from its given topic


def test_a_topic_linked_from_plain_text_scores_within_reach_of_the_given_one(trained: KbPolicy, tmp_path: Path) -> None:
    root, cfg, gcfg, _ = trained
    items = get_benchmark("metaqa-1hop").load(questions=dev_sample(tmp_path / "1-hop" / "qa_dev.txt")).items
    with open_index(root / "a", cfg) as index:
        retriever = GraphFlowRetriever.open(index, HashingEmbedder(dim=DIM), str(root / "policy"), gcfg)
        plain = [it.question for it in items]
        given = retriever.retrieve_many(plain, topics=[it.topic for it in items])
        linked = retriever.retrieve_many(plain)

    def hits(results: list[Any]) -> float:
        return sum(M.hits_at_1(r.answers()[:1], it.answers) for r, it in zip(results, items, strict=True)) / len(items)

    assert all(r.starts and r.starts[0].method != "question:name" for r in given)  # the topic itself started it
    assert hits(given) - hits(linked) <= LINKED_WITHIN, (hits(given), hits(linked))
    assert hits(given) > 0.5


def test_hxd2_query_topic_starts_the_walk_there(trained: KbPolicy, capsys: Any) -> None:
    from jobs import query

    root, _, _, _ = trained
    common = [
        "--index",
        str(root / "a"),
        "--mode",
        "graphflow",
        "--policy",
        str(root / "policy"),
        "--set",
        f"graphflow.cache_dir={root / 'cache'}",
        "--json",
        "--trace",
    ]
    rc = query.main([*common, "--topic", "The Public Eye", "who directed it"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["answer"].startswith("Howard Franklin"), out
    assert out["trace"]["topic"] == "The Public Eye"
    assert out["trace"]["graphflow"]["starts"][0]["name"] == "The Public Eye"


@pytest.mark.parametrize("hop", [1, 2, 3])
def test_a_plain_question_starts_where_its_bracketed_form_does_at_every_hop(hop: int) -> None:
    # The shipped MetaQA questions of every hop with their topic in the slice's KB, brackets removed, linked by the
    # walk's own name pass over the KB's keys (titles with function words and punctuation: "What Goes Up",
    # "Walking, Walking", "The Lookout"): each starts at its bracketed topic. The full dev sets' rates are in
    # docs/benchmarks/graphflow.md (bench/topic_linking.py).
    import re

    from hxd2_ray.extraction.merge import normalize_name
    from hxd2_ray.extraction.names import named_entities
    from hxd2_ray.graphflow.linking import NAME_MAX_WORDS, plain_question

    data = Path(__file__).resolve().parents[1] / "data" / "eval" / "metaqa"
    keys = set()
    for line in (data / "kb.txt").read_text(encoding="utf-8").splitlines():
        parts = line.split("|")
        if len(parts) == 3:
            keys.update((normalize_name(parts[0]), normalize_name(parts[2])))

    class Keys:  # as the walk's _GraphKeys reads a graph: "the X" answers for "X"
        def get_entities(self, wanted: list[str]) -> list[dict[str, str]]:
            return [{"key": k} for k in wanted if k in keys or f"the {k}" in keys]

    questions = [
        line.split("\t")[0]
        for path in sorted((data / f"{hop}-hop").glob("*"))
        if "qtype" not in path.name
        for line in path.read_text(encoding="utf-8").splitlines()
        if "[" in line
    ]
    checked = 0
    for question in questions:
        topic = normalize_name(re.search(r"\[([^\[\]]+)\]", question).group(1))  # type: ignore[union-attr]
        if topic not in keys:
            continue
        found = named_entities(plain_question(question), Keys(), None, max_words=NAME_MAX_WORDS)
        first = found[0].key if found else None
        assert first is not None and topic in (first, f"the {first}"), question
        checked += 1
    assert checked >= 2  # the sample has questions whose topic the slice holds
