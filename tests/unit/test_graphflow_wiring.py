"""GraphFlow wired into the one query flow: ``graphflow.policy`` makes :func:`hxd2_ray.wiring.build_parts` build the
retriever, so mode ``graphflow`` answers through ``build_pipeline`` (and through ``hxd2 query --policy``); without a
policy the mode says which setting it needs; a policy of another index is refused before any feature is read;
``hxd2 eval run --policy`` records it as the ``graphflow.policy`` override; Serve gives the policy to its index only.
Real Kùzu, Faiss and hashing vectors, the scripted LLM, the policy the policy tests train."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hxd2_ray.config import HxdConfig, load_config
from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.errors import IndexMismatchError
from hxd2_ray.graphflow.retriever import GraphFlowRetriever
from hxd2_ray.retrieval import open_index
from hxd2_ray.retrieval.flow import ModeUnavailableError
from hxd2_ray.retrieval.parts import GraphRetriever
from hxd2_ray.runs.requests import EvalRunRequest, policy_overrides
from hxd2_ray.wiring import build_graph_retriever, build_llm, build_parts, build_pipeline
from tests.unit.graphflow_fixtures import trained_kb_policy
from tests.unit.test_graphflow_data import DIM

QUESTION = "who directed [The Public Eye]"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trained_kb_policy(tmp_path_factory)


def with_policy(cfg: HxdConfig, root: Path, policy: Path | None) -> HxdConfig:
    gcfg = cfg.graphflow.model_copy(
        update={"policy": str(policy) if policy else None, "cache_dir": str(root / "cache")}
    )
    return cfg.model_copy(update={"graphflow": gcfg})


def test_build_parts_holds_the_retriever_only_when_a_policy_is_configured(trained):
    root, cfg, _, _ = trained
    emb = HashingEmbedder(dim=DIM)
    with open_index(root / "a", cfg) as index:
        llm = build_llm(cfg.llm)
        assert build_graph_retriever(index, emb, with_policy(cfg, root, None)) is None
        assert build_parts(index, llm, emb, with_policy(cfg, root, None)).graph_retriever is None
        parts = build_parts(index, llm, emb, with_policy(cfg, root, root / "policy"))
    walker: GraphRetriever | None = parts.graph_retriever  # the retriever is the protocol's object itself
    assert isinstance(walker, GraphFlowRetriever) and walker.policy.meta.kind == "kgqa"


def test_mode_graphflow_answers_through_the_pipeline(trained):
    root, cfg, _, _ = trained
    emb = HashingEmbedder(dim=DIM)
    with open_index(root / "a", cfg) as index:
        flow = build_pipeline("graphflow", index, build_llm(cfg.llm), emb, with_policy(cfg, root, root / "policy"))
        with flow:
            answer = flow.answer(QUESTION)
            films = flow.answer("which films did [Howard Franklin] direct", mode="graphflow")
            assert "graphflow" in flow.modes and flow.walk is not None
    assert answer.path == "graphflow" and answer.candidates[0] == "Howard Franklin"
    with open_index(root / "a", cfg) as index:  # no LLM: the walk alone still answers
        with build_pipeline("graphflow", index, None, emb, with_policy(cfg, root, root / "policy")) as alone:
            assert alone.modes == ("chunk_vector", "graphflow")
            assert alone.answer(QUESTION).text == answer.text
    assert answer.text.split(" | ")[0] == "Howard Franklin"
    assert films.path == "graphflow" and films.candidates[0] == "The Public Eye"


def test_without_a_policy_mode_graphflow_names_the_setting(trained):
    root, cfg, _, _ = trained
    emb = HashingEmbedder(dim=DIM)
    with open_index(root / "a", cfg) as index:
        plain = with_policy(cfg, root, None)
        with pytest.raises(ModeUnavailableError, match=r"--policy DIR, or graphflow\.policy"):
            build_pipeline("graphflow", index, build_llm(cfg.llm), emb, plain)
        with build_pipeline("dual", index, build_llm(cfg.llm), emb, plain) as flow:
            assert "graphflow" not in flow.modes
            with pytest.raises(ModeUnavailableError, match=r"mode 'graphflow' needs a GraphFlow policy.*--policy"):
                flow.answer(QUESTION, mode="graphflow")


def test_a_policy_of_another_index_is_refused_before_any_feature_is_read(trained):
    root, cfg, _, _ = trained
    before = sorted(p.name for p in (root / "cache").iterdir())
    with open_index(root / "b", cfg) as other:
        with pytest.raises(IndexMismatchError, match="trained on another index"):
            build_pipeline(
                "graphflow",
                other,
                build_llm(cfg.llm),
                HashingEmbedder(dim=DIM),
                with_policy(cfg, root, root / "policy"),
            )
    assert sorted(p.name for p in (root / "cache").iterdir()) == before  # no features built for index b


def test_hxd2_query_with_policy(trained, capsys):
    from jobs import query

    root, _, _, _ = trained
    rc = query.main(
        [
            "--index",
            str(root / "a"),
            "--mode",
            "graphflow",
            "--policy",
            str(root / "policy"),
            "--set",
            f"graphflow.cache_dir={root / 'cache'}",
            "--json",
            QUESTION,
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["path"] == "graphflow" and out["answer"].startswith("Howard Franklin")
    rc = query.main(["--index", str(root / "a"), "--mode", "graphflow", QUESTION])
    err = capsys.readouterr().err
    assert rc == 2 and "graphflow.policy" in err and "--policy" in err


def test_eval_run_policy_is_the_graphflow_policy_override(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    req = EvalRunRequest(
        benchmark="metaqa-1hop",
        output="out",
        index="idx",
        modes=("graphflow", "logic"),
        policy="runs/policy #1",
        overrides=("retrieval.top_k_chunks=3",),
    )
    absolute = os.path.abspath("runs/policy #1")
    assert req.overrides == ("retrieval.top_k_chunks=3", f"graphflow.policy={json.dumps(absolute)}")
    assert load_config(None, req.overrides).graphflow.policy == absolute  # quoted: '#' is no YAML comment
    assert EvalRunRequest(**req.model_dump()).overrides == req.overrides  # not added twice
    assert policy_overrides(None) == ()


def test_serve_gives_the_policy_to_its_own_index_only(trained):
    from serve.deployments import configs_per_index

    root, cfg, _, _ = trained
    served = with_policy(cfg, root, root / "policy")
    with open_index(root / "a", cfg) as a, open_index(root / "b", cfg) as b:
        cfgs = configs_per_index(served, {"movies": a, "subset": b})
        assert cfgs["movies"].graphflow.policy == str(root / "policy") and cfgs["subset"].graphflow.policy is None
        assert configs_per_index(served, {"subset": b})["subset"] is served  # one index: the CLI's refusal applies
        with pytest.raises(IndexMismatchError, match="none of the served indexes"):
            configs_per_index(served, {"subset": b, "again": b})
