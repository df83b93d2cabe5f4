"""The multi-stage pipeline end to end with the real vLLM engine and the small model (SmolLM2-135M-Instruct)
over the tiny index (hashing vectors): intent, keywords, refusal gate, logic-form plan + execute, verifier,
answer or fallback, all through one engine. Whatever path a 135M model's replies lead to, the answer must be
non-empty, streamed, and carry its path and trace."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from hxd2_ray.config import MultiStageConfig, load_config
from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.retrieval import open_index
from hxd2_ray.retrieval.flow import PATHS
from hxd2_ray.wiring import build_pipeline
from tests.unit.retrieval_fixtures import DIM, build_tiny_index

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.extended]

REPO = Path(__file__).resolve().parents[2]
LOCAL_CONFIG = REPO / "configs" / "local.yaml"


@pytest.fixture(scope="module")
def engine():
    from hxd2_ray.wiring import build_llm

    cfg = load_config(LOCAL_CONFIG, ["retrieval.answer_max_tokens=32", "retrieval.keyword_max_tokens=48"])
    llm = build_llm(cfg.llm)
    yield cfg, llm
    llm.close()


def _run(pipeline, question, **kwargs):
    started = time.perf_counter()
    events = list(pipeline.answer_stream(question, **kwargs))
    seconds = time.perf_counter() - started
    final = events[-1]
    assert final.kind == "final" and [e.kind for e in events].count("final") == 1
    answer = final.answer
    deltas = "".join(e.text for e in events if e.kind == "delta")
    assert answer.text.strip() and deltas.strip() == answer.text.strip()
    assert answer.path in PATHS and answer.trace["path"] == answer.path and answer.trace["path_reason"]
    json.dumps(answer.to_dict(trace=True), ensure_ascii=False)
    return answer, seconds


def test_multistage_end_to_end_with_vllm(tmp_path, engine):
    cfg, llm = engine
    tiny = build_tiny_index(tmp_path / "index")
    ms_cfg = MultiStageConfig(
        refusal_threshold=0.0,
        logic_timeout_s=300,
        plan_max_tokens=256,
        direct_max_tokens=32,
        logic_answer_max_tokens=32,
    )
    run_cfg = tiny.cfg.model_copy(update={"retrieval": cfg.retrieval, "multistage": ms_cfg})
    embedder = HashingEmbedder(dim=DIM, model_id=tiny.cfg.embedding.model_id)
    with open_index(tiny.root, run_cfg) as index:
        before = index.graph.counts()
        with build_pipeline("auto", index, llm, embedder, run_cfg) as pipeline:
            answer, seconds = _run(pipeline, "Which prize did Thomas Südhof win?")
            trace = answer.trace
            assert trace["intent"]["label"] in ("question", "greeting", "identity", "off_topic")
            if answer.path != "direct":
                assert trace["refusal"]["score"] >= 0.0 and trace["keywords"] is not None
                assert trace["llm_calls"]["keywords"] == 1
                assert trace["logic"] is not None and trace["logic"]["plan"] is not None
                assert answer.path in ("logic_form", "dual_level")
                if answer.path == "dual_level":
                    assert trace["fallback_reason"]
            print(
                f"\n[multistage vllm] path={answer.path} reason={trace['path_reason']!r} "
                f"seconds={seconds:.1f} timings_ms={trace['timings_ms']} calls={trace['llm_calls']} "
                f"tokens={trace['tokens_total']}\n  answer={answer.text[:200]!r}",
                file=sys.stderr,
            )

            greeting, g_seconds = _run(pipeline, "hello")
            assert greeting.path == "direct" and greeting.trace["llm_calls"] == {"answer": 1}
            assert greeting.prompt_tokens > 0 and greeting.completion_tokens > 0
            print(f"[multistage vllm] greeting {g_seconds:.1f}s: {greeting.text[:120]!r}", file=sys.stderr)

            dual, d_seconds = _run(pipeline, "Which prize did Thomas Südhof win?", mode="dual")
            assert dual.path == "dual_level"
            print(f"[multistage vllm] mode=dual {d_seconds:.1f}s", file=sys.stderr)
        assert index.graph.counts() == before
