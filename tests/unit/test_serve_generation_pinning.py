"""A publish in the middle of an ``auto`` request (issue 40, item 5): the Retriever pins a generation, the part
deployments (Planner, PlanExecutor, Verifier) answer from that same one although they have switched to the new one
meanwhile, and every reference of the answer comes from the generation the answer names.

In one process, without Ray: the Retriever and the part deployments are the real classes (their Serve wrappers'
``func_or_class``), the query flow is the default one, and the handles between them are :class:`LocalHandle`, which
runs a ``method.remote(...)`` call in the caller's thread as Serve's sync ``result()`` would. The LLM is scripted;
its planner call is where the new generation is published and picked up by the PlanExecutor and the Retriever.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa
import pytest

from hxd2_ray.graph.read_structures import READS_DIR
from hxd2_ray.index_store.generations import history
from hxd2_ray.index_store.manifest import read_manifest, write_manifest
from hxd2_ray.llm.base import LLMRequest, LLMResponse
from hxd2_ray.llm.scripted import ScriptedLLM
from tests.unit.retrieval_fixtures import index_config, tiny_tables, write_index
from tests.unit.test_query_flow import DEFAULT_REPLIES, GOOD_PLAN, QUESTION

pytest.importorskip("ray.serve")

OLD_PRIZE, NEW_PRIZE = "Nobel Prize", "Lasker Award"
OLD_SOURCE, NEW_SOURCE = "thomas_sudhof.md", "thomas_sudhof_2024.md"


def _tables(generation: int) -> tuple[pa.Table, ...]:
    """The tiny index; from generation 2 on, Südhof's prize is another one and his document another file."""
    tables = tiny_tables()
    if generation == 1:
        return tables

    def rewrite(table: pa.Table) -> pa.Table:
        text = json.dumps(table.to_pylist(), ensure_ascii=False)
        text = text.replace(OLD_PRIZE, NEW_PRIZE).replace(OLD_PRIZE.lower(), NEW_PRIZE.lower())
        return pa.Table.from_pylist(json.loads(text.replace(OLD_SOURCE, NEW_SOURCE)), schema=table.schema)

    return tuple(rewrite(t) for t in tables)


def _publish(root: Path, generation: str, number: int, tmp: Path) -> None:
    """A generation as the index job publishes one: its files under generations/<id>/, then the manifest."""
    built = tmp / generation
    cfg = index_config()
    from hxd2_ray.embedding.hashing import HashingEmbedder

    embedder = HashingEmbedder(dim=cfg.embedding.dim, model_id=cfg.embedding.model_id)
    write_index(built, cfg, *_tables(number), embed=embedder.embed)
    target = root / "generations" / generation
    target.mkdir(parents=True)
    for name in ("graph.kuzu", "vectors", READS_DIR):
        if (built / name).exists():
            shutil.move(str(built / name), str(target / name))
    current = read_manifest(root) if (root / "manifest.json").exists() else None
    fresh = read_manifest(built).model_copy(
        update={"generation": generation, "generations": history(current, generation, "update", {}), "files": {}}
    )
    write_manifest(root, fresh)


class _Call:
    """What ``handle.method.remote(...)`` returns: ``result()`` runs the call (a coroutine to its end)."""

    def __init__(self, run: Callable[[], Any]):
        self._run = run

    def result(self, timeout_s: float | None = None) -> Any:
        return self._run()

    def __iter__(self) -> Iterator[Any]:  # a streaming call
        return iter(self._run())

    def cancel(self) -> None:
        pass


class _Method:
    def __init__(self, target: Any, name: str):
        self._target, self._name = target, name

    def remote(self, *args: Any, **kwargs: Any) -> _Call:
        def run() -> Any:
            out = getattr(self._target, self._name)(*args, **kwargs)
            return asyncio.run(out) if inspect.iscoroutine(out) else out

        return _Call(run)


class LocalHandle:
    """A Serve deployment handle over an object in this process."""

    def __init__(self, target: Any):
        self._target = target

    def options(self, **_: Any) -> "LocalHandle":
        return self

    def __getattr__(self, name: str) -> _Method:
        return _Method(self._target, name)


class LLMDeployment:
    """The LLM deployment's two calls over a scripted LLM."""

    def __init__(self, llm: ScriptedLLM):
        self.llm = llm

    def complete(self, requests: list[LLMRequest]) -> list[LLMResponse]:
        return self.llm.complete(requests)

    def stream(self, request: LLMRequest) -> Iterator[str]:
        yield self.llm.complete([request])[0].text


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    from serve.deployments.parts import PlanExecutorServer, PlannerServer, VerifierServer
    from serve.deployments.retriever import Retriever

    monkeypatch.setattr(sys, "setswitchinterval", lambda _s: None)  # the Retriever's, for its replica process
    root = tmp_path / "index"
    root.mkdir()
    _publish(root, "g000001", 1, tmp_path / "build")
    cfg_json = index_config().model_dump(mode="json")
    box: dict[str, Any] = {"armed": False, "published": False}

    def plan(req: LLMRequest) -> str:
        if box["armed"] and not box["published"]:  # mid-request: the Retriever has pinned g000001, asks for a plan
            box["published"] = True
            _publish(root, "g000002", 2, tmp_path / "build")
            box["executor"].lives["tiny"].refresh()  # the part replicas switch (their poll)
            box["retriever"].lives["tiny"].refresh()
        return GOOD_PLAN

    replies = {**DEFAULT_REPLIES, "logic_plan": plan, "logic_repair": GOOD_PLAN}

    def handler(req: LLMRequest) -> str:
        reply = replies[req.tag]
        return reply(req) if callable(reply) else reply

    llm = LocalHandle(LLMDeployment(ScriptedLLM(handler)))
    indexes = {"tiny": str(root)}
    parts = {
        "planner": LocalHandle(PlannerServer.func_or_class(cfg_json, llm, transport="actor")),
        "executor": LocalHandle(
            executor := PlanExecutorServer.func_or_class(cfg_json, indexes, llm, None, transport="actor", poll_s=0)
        ),
        "verifier": LocalHandle(VerifierServer.func_or_class(cfg_json, llm, transport="actor")),
    }
    retriever = Retriever.func_or_class(
        cfg_json, indexes, llm, None, parts=parts, threads=2, mode="auto", transport="actor", poll_s=0
    )
    box.update(executor=executor, retriever=retriever, armed=True)
    try:
        yield box
    finally:
        retriever.__del__()
        executor.__del__()


def _ask(retriever: Any) -> dict[str, Any]:
    payload = asyncio.run(retriever.answer("tiny", QUESTION, trace=True, mode="auto"))
    assert "error" not in payload, payload
    return payload


def _prizes(payload: dict[str, Any]) -> list[str]:
    """The names the plan's retrieval step found (the prize), as the PlanExecutor read them."""
    return list(payload["trace"]["logic"]["evidence"]["steps"][0]["value"]["names"])


def test_a_publish_mid_request_leaves_the_whole_answer_on_the_generation_it_names(served: dict[str, Any]) -> None:
    during = _ask(served["retriever"])
    assert served["published"] and served["executor"].lives["tiny"].generation == "g000002"
    assert during["generation"] == during["trace"]["generation"] == "g000001"
    assert during["path"] == "logic_form", during.get("path_reason")
    # The PlanExecutor read the pinned generation, not the one it had switched to: g000001's prize ...
    assert _prizes(during) == [OLD_PRIZE]
    # ... and every reference is a document of g000001.
    sources = [r["source_id"] for r in during["references"]]
    assert sources and OLD_SOURCE in sources and NEW_SOURCE not in sources, sources

    after = _ask(served["retriever"])  # the next request reads the new generation, everywhere
    assert after["generation"] == "g000002" and _prizes(after) == [NEW_PRIZE]
    sources = [r["source_id"] for r in after["references"]]
    assert NEW_SOURCE in sources and OLD_SOURCE not in sources, sources


class _ReadsItsGeneration:
    """A GraphFlow retriever stand-in built on one open generation: it answers with the generation it reads."""

    def __init__(self, index: Any):
        self.generation = index.manifest.generation

    def retrieve(self, question: str, topic: str | None = None) -> str:
        return self.generation


def test_the_graph_walker_walks_the_generation_the_request_pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The GraphWalker deployment (mode graphflow, and the walk step of auto) has switched to a newly published
    generation; a request the Retriever pinned to the previous one is walked on that one, reopened on demand."""
    import hxd2_ray.wiring
    from serve.deployments.parts import GraphWalkerServer
    from serve.handles import HandleGraphRetriever, RequestScope, scoped

    monkeypatch.setattr(hxd2_ray.wiring, "build_graph_retriever", lambda index, _emb, _cfg: _ReadsItsGeneration(index))
    root = tmp_path / "index"
    root.mkdir()
    _publish(root, "g000001", 1, tmp_path / "build")
    cfg = index_config()
    cfg_json = cfg.model_copy(update={"graphflow": cfg.graphflow.model_copy(update={"policy": "stand-in"})})
    walker = GraphWalkerServer.func_or_class(
        cfg_json.model_dump(mode="json"), {"tiny": str(root)}, None, transport="actor", poll_s=0
    )
    try:
        adapter = HandleGraphRetriever(LocalHandle(walker), "tiny")
        _publish(root, "g000002", 2, tmp_path / "build")
        walker.lives["tiny"].refresh()  # the walker's replica has switched
        assert walker.lives["tiny"].generation == "g000002"
        assert scoped(RequestScope(generation="g000001"), adapter.retrieve, QUESTION) == "g000001"
        assert scoped(RequestScope(generation="g000002"), adapter.retrieve, QUESTION) == "g000002"
    finally:
        walker.__del__()
