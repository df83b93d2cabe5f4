"""The web UI's files and the index views behind it, without Ray: the ingress app (``serve.api.make_api``) over a
backend that answers views from the tiny Kùzu + Faiss index opened in this process (the Retriever's own
:class:`~serve.index_views.IndexViews`). The browser test is ``tests/integration/test_web_ui.py``."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from serve.api import ApiError, ApiSettings, make_api
from serve.auth import ApiKeys
from serve.index_views import IndexViews, NotInIndex
from serve.web_ui import OPEN_UI_PATH, load_assets
from tests.unit.retrieval_fixtures import build_tiny_index, index_config

KEY = "sk-ui-unit"
UI_FOLDER = Path(__file__).resolve().parents[2] / "serve" / "ui"


class ViewsBackend:
    """The Retriever's side of the views, in process: a missing chunk or entity is its 404 payload."""

    def __init__(self, views: IndexViews):
        self.views = views
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    async def index_view(self, kind: str, index: str, params: dict[str, Any], deadline: float) -> dict[str, Any]:
        self.calls.append((kind, index, params))
        try:
            return self.views.run(kind, index, params)
        except NotInIndex as exc:
            raise ApiError(404, str(exc)) from None


@pytest.fixture(scope="module")
def opened(tmp_path_factory) -> Any:
    from hxd2_ray.retrieval import open_index

    tiny = build_tiny_index(tmp_path_factory.mktemp("ui") / "index")
    index = open_index(tiny.root, index_config())
    yield index
    index.close()


@pytest.fixture(scope="module")
def backend(opened) -> ViewsBackend:
    return ViewsBackend(IndexViews({"tiny": opened}))


@pytest.fixture(scope="module")
def app(backend) -> Any:
    return make_api(backend, ApiSettings(indexes=("tiny",), default_index="tiny"), ApiKeys([KEY]))


def get(app: Any, path: str, key: str | None = KEY, **params: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return await client.get(path, headers=headers, params=params or None)

    return asyncio.run(go())


def raw_get(app: Any, path: str, key: str | None = None) -> tuple[int, bytes]:
    """One GET straight through the ASGI app with ``path`` as the server would decode it (no client normalises
    it first)."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8", "surrogateescape"),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"authorization", f"Bearer {key}".encode())] if key else [],
        "client": ("127.0.0.1", 1),
        "server": ("t", 80),
    }
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


# -------------------------------------------------------------------------------------------- the files


def test_the_page_is_open_and_loads_only_its_own_files(app):
    page = get(app, "/ui/", key=None)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    redirect = get(app, "/ui", key=None)
    assert redirect.status_code == 308 and redirect.headers["location"] == "ui/"
    # Everything the page names is a file of its folder, by a relative name (or the empty data: icon).
    linked = re.findall(r"""(?:src|href)="([^"]+)\"""", page.text)
    assert linked and set(linked) - {"data:,"} <= set(load_assets())
    for name, asset in load_assets().items():
        r = get(app, f"/ui/{name}", key=None)
        assert r.status_code == 200 and r.content == asset.body and r.headers["content-type"] == asset.media_type


def test_the_assets_are_the_folder_s_files_and_its_package_data():
    assert set(load_assets()) == {p.name for p in UI_FOLDER.iterdir() if p.is_file()}
    assert {"index.html", "app.js", "graph.js", "style.css"} <= set(load_assets())
    pyproject = (UI_FOLDER.parents[1] / "pyproject.toml").read_text()
    assert re.search(r'^"serve" = \[.*"ui/\*".*\]$', pyproject, re.M), "serve/ui/* is not package data"


@pytest.mark.parametrize(
    "path",
    [
        "/ui/../api.py",
        "/ui/..",
        "/ui/../../pyproject.toml",
        "/ui/%2e%2e/api.py",
        "/ui/..%2fapi.py",
        "/ui/.hidden",
        "/ui/index.html/",
        "/ui//etc/passwd",
        "/ui/ui/index.html",
        "/ui/../serve/auth.py",
        "/ui/index.html\x00.js",
        "/ui/app.js/..",
        "/uix/app.js",
        "/ui/api.py",
        "/ui/__init__.py",
    ],
)
def test_no_path_reaches_a_file_outside_the_folder(app, path):
    # Without a key the guard refuses what is not a plain file name; with one, the route knows no such file (a
    # trailing slash is redirected to the name without it, never served).
    for key, expected in ((None, (401, 404)), (KEY, (404, 307))):
        status, body = raw_get(app, path, key)
        assert status in expected, (path, key, status)
        assert b"import" not in body and b"[project]" not in body and b"root:" not in body


def test_the_guard_opens_only_plain_file_names_under_ui():
    for path in ("/ui", "/ui/", "/ui/app.js", "/ui/style.css", "/ui/index.html"):
        assert OPEN_UI_PATH.fullmatch(path), path
    for path in ("/ui/../v1/models", "/ui/a/b.js", "/ui/.js", "/ui/app", "/v1/ui/app.js", "/ui/app.js/x", "/uix"):
        assert not OPEN_UI_PATH.fullmatch(path), path


# -------------------------------------------------------------------------------------------- the views


def test_the_views_need_the_key(app, backend):
    backend.calls.clear()
    for path in ("/v1/indexes/tiny/stats", "/v1/indexes/tiny/chunks/c3", "/v1/indexes/tiny/graph?entity=x"):
        assert get(app, path, key=None).status_code == 401
        assert get(app, path, key="sk-wrong").status_code == 401
    assert backend.calls == []


def test_a_chunk_by_its_id(app):
    r = get(app, "/v1/indexes/tiny/chunks/c3")
    assert r.status_code == 200, r.text
    chunk = r.json()
    assert chunk["text"] == "Robert Malenka studies synaptic transmission at Stanford University."
    assert chunk["doc_source_id"] == "robert_malenka.txt" and chunk["index"] == "tiny"
    assert get(app, "/v1/indexes/tiny/chunks/c999").status_code == 404
    assert get(app, "/v1/indexes/other/chunks/c3").json()["error"]["code"] == "model_not_found"
    for bad in ("c.3", "c%203", "x" * 129):
        assert get(app, f"/v1/indexes/tiny/chunks/{bad}").status_code == 422, bad


def test_the_graph_around_entities(app, backend):
    r = get(app, "/v1/indexes/tiny/graph", entity=["Robert Malenka", "stanford university", "Nobody"])
    assert r.status_code == 200, r.text
    view = r.json()
    assert view["center"] == ["robert malenka", "stanford university"] and view["not_found"] == ["Nobody"]
    keys = {n["key"] for n in view["nodes"]}
    assert keys >= {"robert malenka", "stanford university", "synaptic transmission"}
    assert all(e["source"] in keys and e["target"] in keys for e in view["edges"]) and view["edges"]
    assert {n["hops"] for n in view["nodes"]} == {0, 1}
    alone = get(app, "/v1/indexes/tiny/graph", entity="Robert Malenka", hops=0).json()
    assert [n["key"] for n in alone["nodes"]] == ["robert malenka"]
    cut = get(app, "/v1/indexes/tiny/graph", entity="Thomas Südhof", hops=2, max_nodes=2).json()
    assert len(cut["nodes"]) == 2 and cut["not_shown"] > 0
    # Request text is a parameter of the store's reads, never part of a query: it only names nothing.
    backend.calls.clear()
    r = get(app, "/v1/indexes/tiny/graph", entity=["x') RETURN 1 //", "MATCH (n) DETACH DELETE n"])
    assert r.status_code == 404 and "no entity named" in r.json()["error"]["message"]
    assert backend.calls[0][2]["entities"] == ["x') RETURN 1 //", "MATCH (n) DETACH DELETE n"]


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"entity": "x", "hops": 3},
        {"entity": "x", "hops": -1},
        {"entity": "x", "max_nodes": 0},
        {"entity": "x", "max_nodes": 151},
        {"entity": "x", "hops": "one"},
        {"entity": "x" * 201},
        {"entity": [f"e{i}" for i in range(21)]},
        {"entity": ""},
    ],
)
def test_graph_parameters_out_of_bounds_are_422(app, backend, params):
    backend.calls.clear()
    r = get(app, "/v1/indexes/tiny/graph", **params)
    assert r.status_code == 422 and r.json()["error"]["type"] == "invalid_request_error", (params, r.text)
    assert backend.calls == []


def test_the_index_statistics_are_computed_once(app, backend, opened):
    first = get(app, "/v1/indexes/tiny/stats")
    assert first.status_code == 200, first.text
    stats = first.json()
    assert stats["counts"] == opened.graph.counts()
    assert stats["top_entities"][0]["degree"] == stats["degree"]["max"]
    assert stats["manifest"]["fingerprint"] == opened.manifest.fingerprint
    assert get(app, "/v1/indexes/tiny/stats").json() == stats
    assert [key.split("\n")[0] for key in backend.views._stats] == ["tiny"]  # one scan, of the one generation
