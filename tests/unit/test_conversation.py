"""A conversation's last question rewritten to stand alone before retrieval (issue 45, item 1), over the tiny index
with the scripted LLM's deterministic rewrite (its first pronoun replaced by the latest name the user gave)."""

from __future__ import annotations

import pytest

from hxd2_ray.config import MultiStageConfig, ScriptedLLMConfig
from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.llm.scripted import ScriptedLLM
from hxd2_ray.retrieval import open_index
from hxd2_ray.retrieval.conversation import recent_turns
from hxd2_ray.wiring import build_pipeline
from tests.unit.retrieval_fixtures import DIM, build_tiny_index

HISTORY = [
    {"role": "user", "content": "Tell me about Brian Kobilka"},
    {"role": "assistant", "content": "He is a professor at Stanford University."},
]


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    tiny = build_tiny_index(tmp_path_factory.mktemp("conv") / "index")
    index = open_index(tiny.root, tiny.cfg)
    cfg = tiny.cfg.model_copy(update={"multistage": MultiStageConfig(history_turns=4)})
    llm = ScriptedLLM.from_config(ScriptedLLMConfig())
    embedder = HashingEmbedder(dim=DIM, model_id=tiny.cfg.embedding.model_id)
    with build_pipeline("auto", index, llm, embedder, cfg) as pipeline:
        yield pipeline, llm
    index.close()


@pytest.mark.parametrize("mode", ["dual", "auto"])
def test_a_follow_up_is_rewritten_from_the_history_and_the_trace_shows_it(flow, mode):
    pipeline, llm = flow
    answer = pipeline.answer("Which prize did he win?", mode=mode, history=HISTORY)
    trace = answer.trace
    assert trace["conversation"] == {
        "original": "Which prize did he win?",
        "rewritten": "Which prize did Brian Kobilka win?",
        "history_turns": 2,
    }
    assert trace["question"] == "Which prize did Brian Kobilka win?"  # what retrieval and the answer used
    assert any("Brian Kobilka" in (r.title or "") or "kobilka" in r.source_id for r in answer.references)
    rewrite = [r for r in llm.requests_by_tag("rewrite") if "Which prize did he win?" in r.messages[-1]["content"]]
    assert rewrite and "User: Tell me about Brian Kobilka" in rewrite[-1].messages[-1]["content"]


def test_no_history_no_rewrite_call(flow):
    pipeline, llm = flow
    before = len(llm.requests_by_tag("rewrite"))
    answer = pipeline.answer("Which prize did Brian Kobilka win?", mode="dual")
    assert "conversation" not in answer.trace or answer.trace["conversation"] is None
    assert len(llm.requests_by_tag("rewrite")) == before


def test_the_history_read_is_bounded_in_turns_and_characters():
    long = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "x" * 90} for i in range(20)]
    turns = recent_turns(long, max_turns=4, max_chars=10_000)
    assert [text.split()[1] for _, text in turns] == ["16", "17", "18", "19"]
    by_chars = recent_turns(long, max_turns=100, max_chars=350)
    assert len(by_chars) == 3 and by_chars[-1][1].startswith("message 19")
    assert recent_turns([{"role": "system", "content": "be brief"}, {"role": "tool", "content": "x"}], 4, 100) == []


def test_the_http_api_hands_the_earlier_turns_on():
    import asyncio

    import httpx

    from serve.api import ApiSettings, make_api
    from serve.auth import ApiKeys

    seen: list[object] = []

    class Backend:
        async def answer(self, index, question, trace, deadline, mode=None, topic=None, history=None):
            seen.append((question, history))
            return {"answer": "ok", "references": [], "usage": {}}

    app = make_api(Backend(), ApiSettings(indexes=("tiny",), default_index="tiny"), ApiKeys(["k"]))
    messages = [
        {"role": "system", "content": "be brief"},
        *HISTORY,
        {"role": "user", "content": "Which prize did he win?"},
    ]

    async def go() -> None:
        headers = {"Authorization": "Bearer k"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", headers=headers) as c:
            chat = await c.post("/v1/chat/completions", json={"model": "tiny", "messages": messages})
            query = await c.post("/v1/query", json={"question": "Which prize did he win?", "history": HISTORY})
            bad = await c.post("/v1/query", json={"question": "q", "history": [{"role": "tool", "content": "x"}]})
            alone = await c.post("/v1/query", json={"question": "Who is Ada?"})
            assert (chat.status_code, query.status_code, bad.status_code, alone.status_code) == (200, 200, 422, 200)

    asyncio.run(go())
    assert seen == [("Which prize did he win?", HISTORY), ("Which prize did he win?", HISTORY), ("Who is Ada?", None)]


def test_a_reply_that_is_no_rewrite_gives_the_question_the_latest_user_turn(flow):
    """What SmolLM2-135M did in the default-path test: it answered the statement of the assistant's turn."""
    from hxd2_ray.config import MultiStageConfig
    from hxd2_ray.llm.scripted import ScriptedLLM
    from hxd2_ray.retrieval.conversation import standalone_question
    from hxd2_ray.retrieval.intent import load_multistage_prompts

    prompts = load_multistage_prompts().for_language("en")
    cfg = MultiStageConfig()
    for reply, why in (
        ("He is a professor at Stanford University.", "repeated a turn"),
        ("Brian Kobilka won the Nobel Prize.", "not a question"),
        ("", "empty"),
    ):
        llm = ScriptedLLM(lambda req, reply=reply: reply)
        rewrite = standalone_question(llm, prompts, cfg, "Which prize did he win?", HISTORY)
        assert rewrite.question == "Which prize did he win? (Tell me about Brian Kobilka)", reply
        assert why in rewrite.note and rewrite.to_dict()["rewritten"] == rewrite.question
