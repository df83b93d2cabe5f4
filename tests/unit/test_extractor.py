"""Loop-NER shell: round batching, judge semantics, retries, accounting; and the ScriptedLLM fake."""

from __future__ import annotations

import json

import pytest

from hxd2_ray.config import ExtractionConfig, ScriptedLLMConfig
from hxd2_ray.extraction.extractor import Extractor, judge_says_yes
from hxd2_ray.extraction.prompts import load_prompts
from hxd2_ray.llm.base import LLMRequest, LLMResponse
from hxd2_ray.llm.scripted import ScriptedLLM, ScriptExhausted
from hxd2_ray.types import Chunk

PROMPTS = load_prompts()


def make_chunks(n=3, texts=None):
    texts = texts or [f"Chunk number {i} mentions Alice{i} and Bob{i}." for i in range(n)]
    return [Chunk(id=f"c{i}", doc_id="d", order=i, start=0, text=t) for i, t in enumerate(texts)]


def entity_json(*names):
    return json.dumps(
        {
            "entities": [{"name": n, "type": "person", "description": f"about {n}"} for n in names],
            "relations": [],
            "content_keywords": [],
        }
    )


class Scripted:
    """Handler that answers by tag: the extraction, each glean, and the judge are configurable per chunk."""

    def __init__(self, judge="yes", judge_by_chunk=None):
        self.judge = judge
        self.judge_by_chunk = judge_by_chunk or {}

    def chunk_of(self, req: LLMRequest) -> str:
        text = req.messages[1]["content"]
        return text.rsplit("\n", 1)[1]

    def __call__(self, req: LLMRequest) -> str:
        text = self.chunk_of(req)
        if req.tag == "extract":
            return entity_json(f"E0 {text[:14]}")
        if req.tag == "glean":
            round_no = sum(1 for m in req.messages if m["role"] == "assistant")
            return entity_json(f"E{round_no} {text[:14]}")
        if req.tag == "judge":
            return self.judge_by_chunk.get(text, self.judge)
        raise AssertionError(f"unexpected tag {req.tag}")


def run(loop_ner, max_gleaning, judge="yes", n=3, **llm_kwargs):
    llm = ScriptedLLM(Scripted(judge), **llm_kwargs)
    cfg = ExtractionConfig(gleaning="always", loop_ner=loop_ner, max_gleaning=max_gleaning)
    result = Extractor(llm, cfg, PROMPTS).extract(make_chunks(n))
    return llm, result


def round_tags(llm: ScriptedLLM) -> list[str]:
    """The tag of each complete() call (all requests of one call share a tag)."""
    tags, i = [], 0
    for size in llm.batch_sizes:
        batch = llm.requests[i : i + size]
        assert len({r.tag for r in batch}) == 1, "a round mixes request kinds"
        tags.append(batch[0].tag)
        i += size
    return tags


@pytest.mark.parametrize(
    "loop_ner,max_gleaning,judge,expected_rounds",
    [
        ("base", 0, "yes", ["extract"]),
        ("base", 1, "yes", ["extract", "glean"]),  # the judge after the last glean is skipped
        ("base", 2, "yes", ["extract", "glean", "judge", "glean"]),
        ("base", 2, "no", ["extract", "glean", "judge"]),
        ("base", 3, "yes", ["extract", "glean", "judge", "glean", "judge", "glean"]),
        ("trial", 0, "yes", ["extract"]),
        ("trial", 1, "yes", ["extract", "judge", "glean"]),
        ("trial", 1, "no", ["extract", "judge"]),
        ("trial", 2, "yes", ["extract", "judge", "glean", "judge", "glean"]),
        ("trial", 2, "no", ["extract", "judge"]),
    ],
)
def test_rounds_are_batched_across_chunks(loop_ner, max_gleaning, judge, expected_rounds):
    llm, result = run(loop_ner, max_gleaning, judge, n=3)
    assert round_tags(llm) == expected_rounds
    assert llm.complete_calls == len(expected_rounds)
    assert llm.batch_sizes == [3] * len(expected_rounds)
    gleans = expected_rounds.count("glean")
    for i, ext in enumerate(result):
        assert ext.chunk_id == f"c{i}"
        assert ext.llm_calls == len(expected_rounds)
        assert len(ext.entities) == 1 + gleans
        assert not ext.error


@pytest.mark.parametrize("reply", ["yes", "YES", "Yes.", " yes, a few remain", "**Yes**", '"yes"', "是的", "是"])
def test_judge_explicit_yes_continues(reply):
    assert judge_says_yes(reply)
    llm, _ = run("trial", 1, reply, n=2)
    assert round_tags(llm) == ["extract", "judge", "glean"]


@pytest.mark.parametrize("reply", ["no", "No.", "NO", "maybe", "", "yes/no", "I think there are more.", "否", "nope"])
def test_judge_anything_else_stops(reply):
    assert not judge_says_yes(reply)
    llm, _ = run("trial", 1, reply, n=2)
    assert round_tags(llm) == ["extract", "judge"]


def test_only_chunks_answering_yes_continue():
    chunks = make_chunks(3)
    judge_by_chunk = {chunks[1].text: "no"}
    llm = ScriptedLLM(Scripted("yes", judge_by_chunk))
    result = Extractor(llm, ExtractionConfig(gleaning="always", loop_ner="base", max_gleaning=3), PROMPTS).extract(
        chunks
    )
    # extract 3, glean 3, judge 3, glean 2 (c1 stopped), judge 2, glean 2
    assert llm.batch_sizes == [3, 3, 3, 2, 2, 2]
    assert [len(e.entities) for e in result] == [4, 2, 4]
    assert [e.llm_calls for e in result] == [6, 3, 6]


def test_history_is_multi_turn():
    llm, _ = run("base", 2, "yes", n=1)
    extract, glean1, judge, glean2 = llm.requests
    assert [m["role"] for m in glean1.messages] == ["system", "user", "assistant", "user"]
    assert glean1.messages[:2] == extract.messages
    assert glean1.messages[2]["content"] == entity_json("E0 Chunk number 0")
    assert glean1.messages[3]["content"].startswith("MANY entities were missed")
    assert [m["role"] for m in judge.messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert judge.choices == ("yes", "no")
    # The judge exchange is not part of the next continue's history.
    assert [m["role"] for m in glean2.messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert glean2.messages[:4] == glean1.messages
    assert glean2.json_schema is not None and glean1.json_schema is not None


def test_without_constrained_decoding_no_schema_and_no_choices():
    class Plain(ScriptedLLM):
        supports_json_schema = False

    llm = Plain(Scripted("yes"))
    Extractor(llm, ExtractionConfig(gleaning="always", loop_ner="trial", max_gleaning=1), PROMPTS).extract(
        make_chunks(1)
    )
    assert all(r.json_schema is None and r.choices is None for r in llm.requests)


def test_retries_only_the_failed_requests():
    llm = ScriptedLLM(Scripted("no"), fail_first_n=1)
    result = Extractor(
        llm, ExtractionConfig(gleaning="always", loop_ner="base", max_gleaning=1), PROMPTS, max_retries=2
    ).extract(make_chunks(3))
    assert llm.batch_sizes == [3, 1, 3]  # extract, retry of c0 only, glean
    assert [e.llm_calls for e in result] == [3, 2, 2]
    assert all(not e.error and len(e.entities) == 2 for e in result)


def test_persistent_failure_is_recorded_not_dropped():
    chunks = make_chunks(3, ["Fine text one.", "POISON text.", "Fine text two."])
    llm = ScriptedLLM(Scripted("no"), fail_when=["POISON"])
    result = Extractor(
        llm, ExtractionConfig(gleaning="always", loop_ner="base", max_gleaning=1), PROMPTS, max_retries=2
    ).extract(chunks)
    assert llm.batch_sizes == [3, 1, 1, 2]  # extract, two retries of the poisoned chunk, glean for the others
    assert [e.chunk_id for e in result] == ["c0", "c1", "c2"]
    bad = result[1]
    assert bad.error.startswith("extraction failed after 3 attempt(s)")
    assert "scripted failure" in bad.error
    assert bad.entities == () and bad.llm_calls == 3
    assert not result[0].error and len(result[0].entities) == 2


def test_failing_glean_keeps_round_zero():
    def handler(req):
        if req.tag == "glean":
            return LLMResponse("", error="engine hiccup")
        return entity_json("Alice")

    llm = ScriptedLLM(handler)
    (ext,) = Extractor(
        llm, ExtractionConfig(gleaning="always", loop_ner="base", max_gleaning=2), PROMPTS, max_retries=1
    ).extract(make_chunks(1))
    assert not ext.error
    assert [e.name for e in ext.entities] == ["Alice"]
    assert llm.batch_sizes == [1, 1, 1]  # extract, glean, glean retry; no judge after a failed glean
    assert ext.llm_calls == 3


def test_failing_judge_stops_the_chunk():
    def handler(req):
        if req.tag == "judge":
            return LLMResponse("yes", error="timeout")
        return entity_json("Alice")

    llm = ScriptedLLM(handler)
    Extractor(
        llm, ExtractionConfig(gleaning="always", loop_ner="trial", max_gleaning=2), PROMPTS, max_retries=0
    ).extract(make_chunks(1))
    assert [r.tag for r in llm.requests] == ["extract", "judge"]


def test_accounting_and_dedup_across_rounds():
    replies = [
        # round 0: one good entity, one malformed (no name), one relation
        json.dumps(
            {
                "entities": [{"name": "Alice", "type": "person", "description": "d"}, {"type": "person"}],
                "relations": [
                    {"source": "Alice", "target": "Bob", "description": "r", "keywords": ["k"], "strength": 2}
                ],
                "content_keywords": ["x"],
            }
        ),
        # glean repeats everything exactly and adds Carol
        json.dumps(
            {
                "entities": [
                    {"name": "Alice", "type": "person", "description": "d"},
                    {"name": "Carol", "type": "person", "description": "c"},
                ],
                "relations": [
                    {"source": "Alice", "target": "Bob", "description": "r", "keywords": ["k"], "strength": 2}
                ],
                "content_keywords": ["x", "y"],
            }
        ),
    ]
    llm = ScriptedLLM(replies, tokens_per_word=1.0)
    (ext,) = Extractor(llm, ExtractionConfig(gleaning="always", max_gleaning=1, grounding="off"), PROMPTS).extract(
        make_chunks(1)
    )
    assert [e.name for e in ext.entities] == ["Alice", "Carol"]
    assert len(ext.relations) == 1
    assert ext.content_keywords == ("x", "y")
    assert ext.malformed_records == 1
    assert ext.llm_calls == 2
    assert ext.completion_tokens == sum(len(r.split()) for r in replies)
    assert ext.prompt_tokens == llm.usage.prompt_tokens > 0


def test_tuples_format_end_to_end():
    reply = '("entity"<|>Alice<|>PERSON<|>d)##("relationship"<|>Alice<|>Bob<|>r<|>k<|>3)<|COMPLETE|>'
    llm = ScriptedLLM([reply])
    (ext,) = Extractor(llm, ExtractionConfig(output_format="tuples", max_gleaning=0), PROMPTS).extract(make_chunks(1))
    assert [(e.name, e.type) for e in ext.entities] == [("Alice", "person")]
    assert [(r.source, r.target, r.strength) for r in ext.relations] == [("Alice", "Bob", 3.0)]
    assert llm.requests[0].json_schema is None


def test_empty_input_makes_no_calls():
    llm = ScriptedLLM([])
    ex = Extractor(llm, ExtractionConfig(), PROMPTS)
    assert ex.extract([]) == [] and ex.summarize([]) == []
    assert llm.complete_calls == 0


def test_summarize_with_fallback():
    def handler(req):
        user = req.messages[-1]["content"]
        if "Broken" in user:
            return LLMResponse("", error="boom")
        if "Empty" in user:
            return "   "
        return "A  summary\nof it."

    llm = ScriptedLLM(handler)
    out = Extractor(llm, ExtractionConfig(), PROMPTS, max_retries=1).summarize(
        [("Alice", ["a", "b"], "en"), ("Broken", ["x", "y"], "en"), ("Empty", ["p"], "zh")]
    )
    assert out == ["A summary of it.", "x\ny", "p"]
    assert llm.batch_sizes == [3, 1]
    assert all(r.tag == "summarize" for r in llm.requests)


# ------------------------------------------------------------------------------------------ ScriptedLLM


def test_scripted_list_runs_out_with_a_helpful_error():
    llm = ScriptedLLM(["only one"])
    req = LLMRequest(messages=({"role": "user", "content": "first"},))
    assert llm.complete([req])[0].text == "only one"
    with pytest.raises(ScriptExhausted, match="unexpected|ran out.*second question"):
        llm.complete([LLMRequest(messages=({"role": "user", "content": "second question"},), tag="x")])


def test_scripted_mapping_prefers_the_last_message():
    llm = ScriptedLLM({"continue": "from last", "chunk A": "from history"})
    history = ({"role": "user", "content": "chunk A"}, {"role": "user", "content": "please continue"})
    assert llm.complete([LLMRequest(messages=history)])[0].text == "from last"
    assert llm.complete([LLMRequest(messages=history[:1])])[0].text == "from history"
    with pytest.raises(ScriptExhausted, match="nothing"):
        llm.complete([LLMRequest(messages=({"role": "user", "content": "nothing"},))])


@pytest.mark.parametrize("fmt", ["json", "tuples"])
def test_builtin_extraction_mode_is_deterministic(fmt):
    cfg = ExtractionConfig(gleaning="always", output_format=fmt, max_gleaning=2)
    chunks = make_chunks(
        2,
        [
            "The physicist Marie Curie worked with Pierre Curie in Paris on radioactivity.",
            "1931年，海洋生物学家林晓梅加入了青岛海洋研究所。",
        ],
    )
    chunks[1] = Chunk(id="c1", doc_id="d", order=1, start=0, text=chunks[1].text, language="zh")
    llm = ScriptedLLM.from_config(ScriptedLLMConfig())
    first = Extractor(llm, cfg, PROMPTS).extract(chunks)
    again = Extractor(ScriptedLLM.from_config(ScriptedLLMConfig()), cfg, PROMPTS).extract(chunks)
    assert first == again
    en, zh = first
    assert [e.name for e in en.entities] == ["Marie Curie", "Pierre Curie", "Paris", "radioactivity"]
    assert [(r.source, r.target) for r in en.relations] == [("Marie Curie", "Pierre Curie"), ("Pierre Curie", "Paris")]
    assert [e.name for e in zh.entities][:3] == ["海洋生物", "学家林晓", "梅加入了"]
    assert all(e.type in cfg.entity_types for e in en.entities + zh.entities)
    assert en.malformed_records == 0 and zh.malformed_records == 0
    # extract, one glean, then the fake judge says no
    assert round_tags(llm) == ["extract", "glean", "judge"]
    summary = Extractor(llm, cfg, PROMPTS).summarize([("Marie Curie", ["A physicist.", "Won prizes."], "en")])
    assert summary == ["A physicist. Won prizes."]


def test_scripted_record_off_and_token_estimate():
    llm = ScriptedLLM(["one two three"], record=False, tokens_per_word=2.0)
    (resp,) = llm.complete([LLMRequest(messages=({"role": "user", "content": "a b"},))])
    assert (resp.prompt_tokens, resp.completion_tokens) == (4, 6)
    assert llm.requests == [] and llm.batch_sizes == [] and llm.complete_calls == 1
    assert llm.count_tokens("x y z") == 6
