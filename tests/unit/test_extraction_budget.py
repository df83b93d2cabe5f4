"""Issue 46: a prefix the engine caches, no runaway generations (a budget per chunk, schema caps, the tuple format's
end marker as a stop string), and gleaning where it pays."""

from __future__ import annotations

import json

import pytest

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.extraction.extractor import Extractor
from hxd2_ray.extraction.grounding import named_spans, names_left
from hxd2_ray.extraction.prompts import MAX_ENTITIES, load_prompts
from hxd2_ray.extraction.render import (
    TUPLE_STOP,
    completion_budget,
    max_items,
    render_continue_request,
    render_extraction_request,
)
from hxd2_ray.llm.base import LLMRequest
from hxd2_ray.llm.scripted import ScriptedLLM
from hxd2_ray.types import Chunk

PROMPTS = load_prompts()


def chunk(text: str, i: int = 0, language: str = "en") -> Chunk:
    return Chunk(id=f"c{i}", doc_id="d", order=i, start=0, text=text, language=language)


def reply(*names: str) -> str:
    entities = [{"name": n, "type": "person", "description": f"about {n}"} for n in names]
    return json.dumps({"entities": entities, "relations": [], "content_keywords": []})


# ------------------------------------------------------------------------------------------- shared prefix


@pytest.mark.parametrize("fmt", ["json", "tuples"])
def test_every_chunk_shares_the_prompt_up_to_its_text(fmt):
    cfg = ExtractionConfig(output_format=fmt)
    a = render_extraction_request(chunk("Marie Curie taught in Paris.", 0), cfg, PROMPTS, True)
    b = render_extraction_request(chunk("Alan Turing worked at Bletchley Park.", 1), cfg, PROMPTS, True)
    assert a.messages[0] == b.messages[0]  # the long system message: instructions, entity types, example
    head_a = a.messages[1]["content"].removesuffix("Marie Curie taught in Paris.")
    head_b = b.messages[1]["content"].removesuffix("Alan Turing worked at Bletchley Park.")
    assert head_a == head_b and len(head_a) > 40  # byte-identical task line and marker, the text last
    # A gleaning call starts with its chunk's whole extraction conversation: the engine reuses that prefix too.
    history = (*a.messages, {"role": "assistant", "content": reply("Marie Curie")})
    glean = render_continue_request(chunk("Marie Curie taught in Paris.", 0), history, cfg, PROMPTS, True)
    assert glean.messages[: len(a.messages)] == a.messages


# --------------------------------------------------------------------------------------- no runaway output


def test_completion_budget_follows_the_chunk_length():
    cfg = ExtractionConfig(max_tokens_per_call=384, completion_tokens_per_char=0.5, min_tokens_per_call=64)
    assert completion_budget(chunk("x" * 60), cfg) == 64  # at least the floor
    assert completion_budget(chunk("x" * 500), cfg) == 250
    assert completion_budget(chunk("x" * 768), cfg) == 384
    assert completion_budget(chunk("x" * 5000), cfg) == 384  # never over the cap
    fixed = cfg.model_copy(update={"completion_tokens_per_char": 0.0})
    assert completion_budget(chunk("x" * 60), fixed) == 384


def test_schema_caps_items_by_length_and_ends_descriptions():
    cfg = ExtractionConfig(chars_per_entity=96, max_description_chars=100, max_name_chars=64)
    assert [max_items(chunk("x" * n), cfg) for n in (10, 384, 385, 768, 5000)] == [4, 4, 8, 8, MAX_ENTITIES]
    req = render_extraction_request(chunk("x" * 768), cfg, PROMPTS, True)
    props = req.json_schema["properties"]
    assert props["entities"]["maxItems"] == 8 and props["relations"]["maxItems"] == 8
    assert props["entities"]["items"]["properties"]["description"]["maxLength"] == 100
    assert props["relations"]["items"]["properties"]["description"]["maxLength"] == 100
    assert req.stop == ()  # the grammar ends a JSON reply
    unlimited = ExtractionConfig(chars_per_entity=0, max_description_chars=0)
    schema = render_extraction_request(chunk("x" * 768), unlimited, PROMPTS, True).json_schema
    assert schema["properties"]["entities"]["maxItems"] == MAX_ENTITIES
    assert "maxLength" not in schema["properties"]["entities"]["items"]["properties"]["description"]


def test_schema_with_caps_compiles_for_xgrammar():
    xgrammar = pytest.importorskip("xgrammar")
    req = render_extraction_request(chunk("x" * 700), ExtractionConfig(), PROMPTS, True)
    grammar = xgrammar.Grammar.from_json_schema(json.dumps(req.json_schema), any_whitespace=False)
    assert "{0, 100}" in str(grammar)  # the description's maxLength is in the grammar, not dropped


def test_tuples_stop_at_the_end_marker():
    cfg = ExtractionConfig(output_format="tuples")
    first = render_extraction_request(chunk("Marie Curie taught in Paris."), cfg, PROMPTS, True)
    assert first.stop == TUPLE_STOP == ("<|COMPLETE|>",)
    history = (*first.messages, {"role": "assistant", "content": '("entity"<|>Marie Curie<|>person<|>x)'})
    assert (
        render_continue_request(chunk("Marie Curie taught in Paris."), history, cfg, PROMPTS, True).stop == TUPLE_STOP
    )


# ------------------------------------------------------------------------------------------ adaptive gleaning


def test_named_spans_and_names_left():
    text = "Demon Dice was created by Lester Smith and Tim Brown. In it, the Bank of England plays."
    assert named_spans(text) == ["demon dice", "lester smith", "tim brown", "bank of england"]
    assert names_left(text, ["Demon Dice", "Smith", "Bank of England"]) == ["tim brown"]
    assert named_spans("林晓梅加入了青岛海洋研究所") == []


class ByChunk:
    """Replies per chunk text: the extraction reply, then one reply per gleaning round."""

    def __init__(self, replies: dict[str, list[str]]):
        self.replies = replies

    def __call__(self, req: LLMRequest) -> str:
        text = req.messages[1]["content"].rsplit("\n", 1)[1]
        if req.tag == "judge":
            return "yes"
        rounds = sum(1 for m in req.messages if m["role"] == "assistant")
        return self.replies[text][rounds]


TEXTS = {
    "nothing": "Lester Smith made Demon Dice with Tim Brown.",  # the first answer parses to nothing
    "ungrounded": "Ada Lovelace wrote notes on the Analytical Engine.",  # names only the prompt's example
    "covered": "Marie Curie lived in Paris.",  # found everything its text names
    "pays": "Alan Turing worked at Bletchley Park with Joan Clarke.",  # names left after the first answer
    "chinese": "林晓梅加入了青岛海洋研究所。",  # no capitals: a round may pay
}
REPLIES = {
    TEXTS["nothing"]: ["not json at all", "still not json"],
    TEXTS["ungrounded"]: [reply("Rachel Osei"), reply("Rachel Osei")],
    TEXTS["covered"]: [reply("Marie Curie", "Paris"), reply("Paris")],
    TEXTS["pays"]: [reply("Alan Turing"), reply("Bletchley Park"), reply("Alan Turing"), reply("Joan Clarke")],
    TEXTS["chinese"]: [reply("林晓梅"), reply("林晓梅")],
}


def extract(gleaning: str, max_gleaning: int) -> tuple[ScriptedLLM, dict[str, list[str]]]:
    llm = ScriptedLLM(ByChunk(REPLIES))
    cfg = ExtractionConfig(gleaning=gleaning, max_gleaning=max_gleaning)
    chunks = [chunk(t, i, "zh" if k == "chinese" else "en") for i, (k, t) in enumerate(TEXTS.items())]
    result = Extractor(llm, cfg, PROMPTS).extract(chunks)
    return llm, {k: [e.name for e in ext.entities] for k, ext in zip(TEXTS, result)}


def gleaned(llm: ScriptedLLM) -> list[str]:
    """Which chunks (by TEXTS key) each gleaning request was about, in order."""
    keys = {t: k for k, t in TEXTS.items()}
    return [keys[r.messages[1]["content"].rsplit("\n", 1)[1]] for r in llm.requests if r.tag == "glean"]


def test_adaptive_gleaning_only_where_a_round_can_pay():
    llm, names = extract("adaptive", 1)
    assert gleaned(llm) == ["pays", "chinese"]
    assert names["pays"] == ["Alan Turing", "Bletchley Park"]
    assert names["covered"] == ["Marie Curie", "Paris"] and names["nothing"] == []


def test_adaptive_gleaning_stops_after_a_round_that_adds_nothing_grounded():
    llm, names = extract("adaptive", 3)
    # pays: round 1 adds Bletchley Park, round 2 only repeats Alan Turing: no round 3 (Joan Clarke is never asked
    # for). chinese: its one round repeats, so it stops after it.
    assert gleaned(llm) == ["pays", "chinese", "pays"]
    assert names["pays"] == ["Alan Turing", "Bletchley Park"]


def test_an_answer_that_repeats_an_entity_gets_no_gleaning_round():
    text = "Lester Smith made Demon Dice with Tim Brown."
    looping = reply("Lester Smith", "Demon Dice", "Demon Dice")  # grounded, names left, but in a loop
    llm = ScriptedLLM(ByChunk({text: [looping, reply("Tim Brown")]}))
    (ext,) = Extractor(llm, ExtractionConfig(max_gleaning=1), PROMPTS).extract([chunk(text)])
    assert [r.tag for r in llm.requests] == ["extract"]
    assert [e.name for e in ext.entities] == ["Lester Smith", "Demon Dice"]
    llm = ScriptedLLM(ByChunk({text: [reply("Lester Smith", "Demon Dice"), reply("Tim Brown")]}))
    (ext,) = Extractor(llm, ExtractionConfig(max_gleaning=1), PROMPTS).extract([chunk(text)])
    assert [r.tag for r in llm.requests] == ["extract", "glean"]  # the same answer without the repeat: gleaned


def test_always_gleans_every_parsed_chunk():
    llm, _ = extract("always", 1)
    assert sorted(gleaned(llm)) == sorted(["nothing", "ungrounded", "covered", "pays", "chinese"])
