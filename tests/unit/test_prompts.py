"""Prompt data: loading, version hash, rendering of every language x format, the JSON schema."""

from __future__ import annotations

import hashlib
import json
import re
from importlib import resources

import pytest

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.extraction.prompts import (
    TEXT_MARKER,
    extraction_json_schema,
    load_prompts,
    load_prompts_file,
    parse_prompts,
)
from hxd2_ray.extraction.render import (
    JUDGE_CHOICES,
    render_continue_request,
    render_extraction_request,
    render_judge_request,
    render_summary_request,
)
from hxd2_ray.types import Chunk

PROMPTS = load_prompts()


def packaged_bytes() -> bytes:
    return resources.files("hxd2_ray.extraction").joinpath("prompts", "extraction_v1.yaml").read_bytes()


def chunk(text="Marie Curie taught at the Sorbonne.", language="en"):
    return Chunk(id="c1", doc_id="d1", order=0, start=0, text=text, language=language)


def test_version_hash_is_of_the_yaml_bytes():
    assert PROMPTS.version == "v1"
    assert PROMPTS.version_hash == "v1-" + hashlib.sha256(packaged_bytes()).hexdigest()[:12]
    assert re.fullmatch(r"v1-[0-9a-f]{12}", PROMPTS.version_hash)


def test_version_hash_changes_when_the_yaml_changes(tmp_path):
    edited = packaged_bytes().replace(b"MANY entities were missed", b"Many entities were missed")
    path = tmp_path / "extraction_v1.yaml"
    path.write_bytes(edited)
    other = load_prompts_file(path)
    assert other.version == "v1"
    assert other.version_hash != PROMPTS.version_hash
    assert other.for_language("en").continue_extraction.startswith("Many entities")
    path.write_bytes(packaged_bytes())
    assert load_prompts_file(path).version_hash == PROMPTS.version_hash


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("fmt", ["tuples", "json"])
@pytest.mark.parametrize("supports_schema", [True, False])
def test_every_language_and_format_renders(language, fmt, supports_schema):
    cfg = ExtractionConfig(output_format=fmt, entity_types=("person", "spacecraft"))
    c = chunk("林晓梅加入了青岛海洋研究所。" if language == "zh" else "Marie Curie taught at the Sorbonne.", language)
    req = render_extraction_request(c, cfg, PROMPTS, supports_schema)
    system, user = req.messages
    assert (system["role"], user["role"]) == ("system", "user")
    assert "person, spacecraft" in system["content"]
    assert "{" + "entity_types}" not in system["content"] + user["content"]
    assert req.tag == "extract" and req.max_tokens == cfg.min_tokens_per_call  # a short chunk: the least budget
    # Golden: the chunk text is the very end of the user message, right after the marker line.
    assert user["content"].endswith(TEXT_MARKER + "\n" + c.text)
    if fmt == "json":
        assert "JSON" in system["content"]
        assert (req.json_schema is not None) == supports_schema
    else:
        assert "<|>" in system["content"] and "<|COMPLETE|>" in system["content"]
        assert req.json_schema is None


def test_all_chunks_share_the_prefix_before_the_text():
    cfg = ExtractionConfig()
    a = render_extraction_request(chunk("First chunk."), cfg, PROMPTS, True)
    b = render_extraction_request(chunk("A different, longer chunk of text."), cfg, PROMPTS, True)
    assert a.messages[0] == b.messages[0]
    prefix_a = a.messages[1]["content"][: -len("First chunk.")]
    prefix_b = b.messages[1]["content"][: -len("A different, longer chunk of text.")]
    assert prefix_a == prefix_b


def test_language_selection():
    zh_chunk = chunk("林晓梅", "zh")
    auto = render_extraction_request(zh_chunk, ExtractionConfig(language="auto"), PROMPTS, True)
    forced = render_extraction_request(zh_chunk, ExtractionConfig(language="en"), PROMPTS, True)
    assert "目标" in auto.messages[0]["content"]
    assert "-Goal-" in forced.messages[0]["content"]
    # An unknown language falls back to English.
    other = render_extraction_request(chunk("Hallo", "de"), ExtractionConfig(), PROMPTS, True)
    assert "-Goal-" in other.messages[0]["content"]


def test_placeholders_inside_the_chunk_text_are_not_expanded():
    text = "Literal {entity_types} and {input_text} and {} braces."
    req = render_extraction_request(chunk(text), ExtractionConfig(), PROMPTS, True)
    assert req.messages[1]["content"].endswith(text)


def test_continue_and_judge_requests_extend_the_history():
    cfg = ExtractionConfig(output_format="json")
    c = chunk()
    first = render_extraction_request(c, cfg, PROMPTS, True)
    history = (*first.messages, {"role": "assistant", "content": '{"entities": []}'})
    cont = render_continue_request(c, history, cfg, PROMPTS, True)
    assert cont.messages[:3] == history
    assert cont.messages[3] == {"role": "user", "content": PROMPTS.for_language("en").continue_extraction}
    assert cont.tag == "glean" and cont.json_schema == first.json_schema
    judge = render_judge_request(c, history, cfg, PROMPTS, True)
    assert judge.messages[:3] == history and judge.messages[3]["content"] == PROMPTS.for_language("en").judge
    assert judge.tag == "judge" and judge.choices == JUDGE_CHOICES and judge.json_schema is None
    assert render_judge_request(c, history, cfg, PROMPTS, False).choices is None
    zh = render_continue_request(chunk("林晓梅", "zh"), history, cfg, PROMPTS, True)
    assert "遗漏" in zh.messages[-1]["content"]


@pytest.mark.parametrize("language", ["en", "zh"])
def test_summary_request(language):
    cfg = ExtractionConfig(summary_max_tokens=99)
    req = render_summary_request("Marie Curie", ["A physicist.", "Won two\nNobel prizes."], cfg, PROMPTS, language)
    assert req.tag == "summarize" and req.max_tokens == 99
    user = req.messages[-1]["content"]
    assert "Marie Curie" in user
    assert user.endswith("- A physicist.\n- Won two Nobel prizes.")


def test_json_schema_shape():
    schema = extraction_json_schema(("person", "gene", "person"))
    entity = schema["properties"]["entities"]
    assert entity["maxItems"] == 30 and schema["properties"]["relations"]["maxItems"] == 30
    assert entity["items"]["properties"]["type"]["enum"] == ["person", "gene"]
    assert schema["properties"]["relations"]["items"]["properties"]["strength"] == {"type": "number"}
    assert "minItems" not in json.dumps(schema)
    assert list(schema["properties"]) == ["entities", "relations", "content_keywords"]


@pytest.mark.parametrize("language", ["en", "zh"])
def test_json_schema_accepts_the_prompt_example(language):
    jsonschema = pytest.importorskip("jsonschema")
    system = PROMPTS.for_language(language).json_system
    example = system[system.index('{"entities": [\n') :]
    jsonschema.validate(json.loads(example), extraction_json_schema(ExtractionConfig().entity_types))


def test_json_schema_compiles_with_xgrammar():
    xgrammar = pytest.importorskip("xgrammar")
    grammar = xgrammar.Grammar.from_json_schema(json.dumps(extraction_json_schema(ExtractionConfig().entity_types)))
    assert str(grammar)


def test_invalid_prompt_files_are_rejected():
    good = packaged_bytes()
    with pytest.raises(ValueError, match="must end with the line"):
        parse_prompts(good.replace(b"######## Text ########", b"Text:"), "v1")
    with pytest.raises(ValueError, match="missing"):
        parse_prompts(good.replace(b"  judge:", b"  jduge:"), "v1")
    with pytest.raises(ValueError):
        parse_prompts(b"[]", "v1")
