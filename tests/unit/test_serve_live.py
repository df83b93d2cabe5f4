"""What the served app shows of live updates without Ray: the deep health check and the reload need a key (the
open /healthz asks the Retriever at most once per few seconds and shows no counter; it says ready only once the
Retriever answers), and answers name documents relative to the corpus root."""

from __future__ import annotations

from typing import Any

from serve.live_indexes import corpus_root, public_references
from tests.unit.retrieval_fixtures import build_tiny_index
from tests.unit.test_serve_auth import KEY, FakeBackend, client, run


class LiveBackend(FakeBackend):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    async def health(self) -> dict[str, Any]:
        self.asked.append("health")
        return {"served": 12, "indexes": {"tiny": {"generation": "g000003"}}}

    async def reload(self) -> dict[str, Any]:
        self.asked.append("reload")
        return {"generations": {"tiny": "g000004"}}


class StartingBackend(LiveBackend):
    """A Retriever that is not answering yet (its replicas still load the models and answer a first question)."""

    def __init__(self) -> None:
        super().__init__()
        self.ready = False

    async def health(self) -> dict[str, Any]:
        if not self.ready:
            self.asked.append("health")
            raise TimeoutError("no replica yet")
        return await super().health()


def test_the_open_health_check_says_ready_only_once_the_retriever_answers_and_shows_no_counter():
    backend = StartingBackend()

    async def go() -> None:
        async with client(backend, key=None) as anonymous:
            starting = await anonymous.get("/healthz")
            assert starting.status_code == 503 and starting.headers["retry-after"]
            assert starting.json()["error"]["code"] == "starting"
            backend.ready = True
            for _ in range(5):
                plain = await anonymous.get("/healthz")
                assert plain.status_code == 200 and plain.json() == {"status": "ok"}
            assert backend.asked == ["health", "health"]  # a ready answer stands a while: probes cost nothing
            for deep in ("/healthz?deep=true", "/healthz?deep=1", "/healthz?deep=false&x=1"):
                r = await anonymous.get(deep)
                assert r.status_code == 401, (deep, r.text)
        async with client(backend) as keyed:
            r = await keyed.get("/healthz?deep=true")
            assert r.status_code == 200 and r.json() == {"status": "ok", "indexes": {"tiny": "g000003"}}
            assert "served" not in r.text  # no counters, even behind the key

    run(go())


def test_reload_switches_behind_the_key():
    backend = LiveBackend()

    async def go() -> None:
        async with client(backend, key=None) as anonymous:
            assert (await anonymous.post("/v1/admin/reload")).status_code == 401
        async with client(backend, key=KEY) as keyed:
            r = await keyed.post("/v1/admin/reload")
            assert r.status_code == 200 and r.json() == {"generations": {"tiny": "g000004"}}
        assert backend.asked == ["reload"]

    run(go())


def test_references_name_documents_relative_to_the_corpus_root(tmp_path):
    refs = [
        {
            "doc_id": "a",
            "source_id": "/srv/build-host/corpus/people/ada.md",
            "source_path": "/srv/build-host/corpus/people/ada.md",
            "chunk_ids": ["c1"],
        },
        {"doc_id": "b", "source_id": "rec-17", "source_path": "s3://bucket/corpus/b.txt", "chunk_ids": ["c2"]},
        {"doc_id": "c", "source_id": "", "source_path": "", "chunk_ids": []},
    ]
    shown = public_references(refs, "/srv/build-host/corpus", None)
    assert [r["source_path"] for r in shown] == ["people/ada.md", "s3://bucket/corpus/b.txt", ""]
    assert [r["source_id"] for r in shown] == ["people/ada.md", "rec-17", ""]  # a file's id is its path too
    assert all("source_url" not in r for r in shown)
    linked = public_references(refs, "/srv/build-host/corpus", "https://docs.example.org/corpus/")
    assert linked[0]["source_url"] == "https://docs.example.org/corpus/people/ada.md"
    assert linked[1]["source_url"] == "s3://bucket/corpus/b.txt"
    # without a known root, only the file name: never the server's folders
    assert public_references(refs[:1], "", None)[0]["source_path"] == "ada.md"
    tiny = build_tiny_index(tmp_path / "index")
    from hxd2_ray.graph.kuzu_store import KuzuGraphStore

    store = KuzuGraphStore(tiny.root / "graph.kuzu", read_only=True)
    try:
        assert corpus_root(store) == "/corpus"  # the folder the tiny index's three documents lie in
    finally:
        store.close()
