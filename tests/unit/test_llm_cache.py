"""The LLM response cache: what its key covers, what it stores, and that a second run asks the backend nothing."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from hxd2_ray.config import ExtractionConfig, ScriptedLLMConfig
from hxd2_ray.extraction.extractor import Extractor
from hxd2_ray.extraction.prompts import load_prompts
from hxd2_ray.llm.base import LLMRequest, LLMResponse
from hxd2_ray.llm.cache import CachedLLM, CacheLocation, ResponseStore, request_key
from hxd2_ray.llm.metering import MeteredLLM
from hxd2_ray.llm.scripted import ScriptedLLM
from hxd2_ray.types import Chunk

REQ = LLMRequest(messages=({"role": "user", "content": "Who founded Neosensory?"},), max_tokens=64, tag="extract")


def location(tmp_path) -> CacheLocation:
    return CacheLocation(pafs.LocalFileSystem(), str(tmp_path / "_llm_cache"))


@pytest.mark.parametrize(
    "change",
    [
        {"max_tokens": 65},
        {"temperature": 0.7},
        {"json_schema": {"type": "object"}},
        {"choices": ("yes", "no")},
        {"messages": ({"role": "user", "content": "Who founded Neosensory? "},)},
        {"messages": ({"role": "system", "content": "Who founded Neosensory?"},)},
    ],
)
def test_the_key_changes_with_everything_a_reply_depends_on(change):
    from dataclasses import replace

    assert request_key("m", "v1", REQ) != request_key("m", "v1", replace(REQ, **change))


def test_the_key_covers_model_and_prompt_version_but_not_the_tag():
    from dataclasses import replace

    assert request_key("m", "v1", REQ) != request_key("other", "v1", REQ)
    assert request_key("m", "v1", REQ) != request_key("m", "v2", REQ)
    assert request_key("m", "v1", REQ) == request_key("m", "v1", replace(REQ, tag="summarize"))


def test_a_second_client_on_the_same_store_answers_from_it_without_calls(tmp_path):
    backend = MeteredLLM(ScriptedLLM.from_config(ScriptedLLMConfig()))
    first = CachedLLM(backend, ResponseStore(location(tmp_path), backend.model_id), "v1")
    reqs = [REQ, LLMRequest(messages=({"role": "user", "content": "Where is Palo Alto?"},), tag="glean"), REQ]
    replies = first.complete(reqs)
    assert backend.take()[0]["extract"].calls == 1  # the identical request of the batch was asked once
    assert first.take_counts() == ({"extract": 1}, {"extract": 1, "glean": 1})

    again = CachedLLM(backend, ResponseStore(location(tmp_path), backend.model_id), "v1")  # another actor
    assert again.complete(reqs) == replies
    assert backend.take() == ({}, 0.0)
    assert again.take_counts() == ({"extract": 2, "glean": 1}, {})
    # Another prompt version is another key space.
    CachedLLM(backend, ResponseStore(location(tmp_path), backend.model_id), "v2").complete([REQ])
    assert backend.take()[0]["extract"].calls == 1


def test_failed_replies_are_not_stored_and_are_asked_again(tmp_path):
    backend = ScriptedLLM.from_config(ScriptedLLMConfig(fail_when=("Neosensory",)))
    cached = CachedLLM(backend, ResponseStore(location(tmp_path), backend.model_id), "v1")
    assert cached.complete([REQ])[0].error
    healthy = MeteredLLM(ScriptedLLM.from_config(ScriptedLLMConfig()))
    retry = CachedLLM(healthy, ResponseStore(location(tmp_path), healthy.model_id), "v1")
    assert not retry.complete([REQ])[0].error
    assert healthy.take()[0]["extract"].calls == 1


def test_a_torn_part_is_skipped_and_compaction_keeps_every_reply(tmp_path):
    loc = location(tmp_path)
    store = ResponseStore(loc, "m")
    for i in range(5):
        req = LLMRequest(messages=({"role": "user", "content": f"q{i}"},))
        store.put([(request_key("m", "v", req), req, LLMResponse(text=f"a{i}", prompt_tokens=3))])
    folder = loc.partition("m")
    with open(f"{folder}/part-torn.parquet", "wb") as fh:
        fh.write(b"PAR1 torn")
    assert len(ResponseStore(loc, "m")) == 5
    assert ResponseStore(loc, "m").compact(min_parts=2) == 6
    fresh = ResponseStore(loc, "m")
    keys = [request_key("m", "v", LLMRequest(messages=({"role": "user", "content": f"q{i}"},))) for i in range(5)]
    got = fresh.get(keys)
    assert [got[k].text for k in keys] == [f"a{i}" for i in range(5)] and got[keys[0]].prompt_tokens == 3
    assert len(list(pafs.LocalFileSystem().get_file_info(pafs.FileSelector(folder)))) == 1


def test_an_extractor_over_a_warm_cache_extracts_the_same_with_no_calls(tmp_path):
    chunks = [
        Chunk(
            id=f"c{i}",
            doc_id="d",
            order=i,
            start=0,
            text=f"Marie Curie worked with Pierre Curie in Paris on radium number {i}.",
        )
        for i in range(3)
    ]
    cfg = ExtractionConfig(max_gleaning=1)

    def run() -> tuple[list, MeteredLLM]:
        backend = MeteredLLM(ScriptedLLM.from_config(ScriptedLLMConfig()))
        cached = CachedLLM(backend, ResponseStore(location(tmp_path), backend.model_id), "v1")
        return Extractor(cached, cfg, load_prompts()).extract(chunks), backend

    cold, cold_backend = run()
    warm, warm_backend = run()
    assert warm == cold  # token counts included: the stored replies carry them
    assert sum(u.calls for u in cold_backend.take()[0].values()) >= 3
    assert warm_backend.take() == ({}, 0.0)
