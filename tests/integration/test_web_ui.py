"""The web UI (``/ui`` of the served app) in a real browser: Debian's Chromium driven by Playwright, against the
Serve application on a local Ray bound to 127.0.0.1 (the tiny Kùzu + Faiss index, the hashing embedder, the
scripted LLM streaming a word every few tens of milliseconds, auth on).

One application and one browser serve the module; each test has its own browser context (its own session
storage), and every request each page makes is recorded: all of them must go to the app itself.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.integration.tiny_app import served_tiny_app

pytestmark = pytest.mark.integration

APP = "hxd2-ui"
KEY = "sk-ui-test-4Rk9"
QUESTION = "Where does Robert Malenka work?"
CHROMIUM = "/usr/bin/chromium"
# Playwright's own browser download cannot reach its host here: the test drives the system's Chromium.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 30_000
SVG_NAMESPACE = "http://www.w3.org/2000/svg"


def _small(cpus: float, **extra: Any) -> dict[str, Any]:
    return {"ray_actor_options": {"num_cpus": cpus}, **extra}


@pytest.fixture(scope="module")
def base_url(ray_local, tmp_path_factory) -> Iterator[str]:
    with served_tiny_app(
        tmp_path_factory.mktemp("web-ui"),
        APP,
        KEY,
        config_data={"retrieval": {"context_length": 4096, "answer_reserve_tokens": 1024}},
        # A word every 40 ms: the answer visibly grows for about a second.
        scripted={"token_delay_s": 0.04},
        # The smallest app: the parts and the embedder inside the Retriever (2 cores in CI).
        parts="in_replica",
        embedder="in_replica",
        pipeline_threads=4,
        deployment_options={"Ingress": _small(0.1), "Retriever": _small(0.2), "LLM": _small(0.1)},
    ) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        message = f"no Chromium at {CHROMIUM} (scripts/install puts Debian's chromium there when run as root)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Ui:
    page: Any
    base: str
    requests: list[str] = field(default_factory=list)

    def open(self) -> None:
        self.page.goto(f"{self.base}/ui")
        # Connected, or told why not. (Selectors, not wait_for_function: the page's policy forbids eval.)
        self.page.wait_for_selector("#connection:not(:empty), #notice:not([hidden])")

    def use_key(self, key: str) -> None:
        self.page.fill("#api-key", key)
        self.page.click("#save-key")


@pytest.fixture
def ui(base_url, browser) -> Iterator[Ui]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    out = Ui(page, base_url)
    page.on("request", lambda request: out.requests.append(request.url))
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield out
    finally:
        context.close()
    assert out.requests, "the page made no request"
    outside = [
        url
        for url in out.requests
        if urlsplit(url).scheme not in ("data",)
        and (urlsplit(url).hostname, urlsplit(url).port) != ("127.0.0.1", int(base_url.rsplit(":", 1)[1]))
    ]
    assert not outside, f"requests that left the app: {outside}"
    assert not errors, f"script errors on the page: {errors}"


# ----------------------------------------------------------------------------------------------- tests


def test_the_page_and_its_assets_are_served_by_the_app_itself(base_url):
    with httpx.Client(base_url=base_url, timeout=30) as client:
        page = client.get("/ui", follow_redirects=True)
        assert page.status_code == 200 and page.url.path == "/ui/"  # no key needed for the page itself
        assert page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "connect-src 'self'" in policy
        for asset, kind in (("app.js", "text/javascript"), ("graph.js", "text/javascript"), ("style.css", "text/css")):
            r = client.get(f"/ui/{asset}")
            assert r.status_code == 200 and r.headers["content-type"].startswith(kind), asset
            # No address of any other host (the SVG namespace is a name, never fetched).
            assert set(re.findall(r"https?://[^\s\"')]+", r.text)) <= {SVG_NAMESPACE}, asset
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", page.text)
        # Only the folder's own files, whatever the path says; the data routes still need the key.
        for path in ("/ui/..%2Fapi.py", "/ui/%2e%2e/auth.py", "/ui/nothing.js", "/ui/ui/index.html"):
            assert client.get(path).status_code in (401, 404), path
        assert client.get("/v1/indexes/tiny/stats").status_code == 401


def test_the_index_routes_validate_and_answer(base_url):
    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {KEY}"}) as client:
        stats = client.get("/v1/indexes/tiny/stats")
        assert stats.status_code == 200, stats.text
        assert stats.json()["counts"]["entities"] > 0 and stats.json()["top_entities"]
        chunk = client.get("/v1/indexes/tiny/chunks/c3")
        assert chunk.status_code == 200 and "Robert Malenka" in chunk.json()["text"]
        graph = client.get("/v1/indexes/tiny/graph", params={"entity": ["Robert Malenka", "nobody"], "hops": 1})
        assert graph.status_code == 200, graph.text
        body = graph.json()
        assert body["center"] == ["robert malenka"] and body["not_found"] == ["nobody"]
        assert len(body["nodes"]) > 1 and body["edges"]
        assert client.get("/v1/indexes/tiny/chunks/no-such-chunk").status_code == 404
        assert client.get("/v1/indexes/tiny/graph", params={"entity": "nobody"}).status_code == 404
        assert client.get("/v1/indexes/other/stats").status_code == 404
        for params in ({"entity": "x", "hops": 3}, {"entity": "x", "max_nodes": 0}, {}, {"entity": "x" * 201}):
            r = client.get("/v1/indexes/tiny/graph", params=params)
            assert r.status_code == 422 and r.json()["error"]["message"], params


def test_a_wrong_key_shows_a_clear_message(ui):
    from playwright.sync_api import expect

    ui.open()
    notice = ui.page.locator("#notice")
    assert notice.is_visible() and "wrong or missing api key" in notice.inner_text().lower()  # no key yet
    ui.use_key("sk-not-the-key")
    ui.page.wait_for_selector("#api-key.invalid")
    assert "wrong or missing api key" in notice.inner_text().lower()
    ui.use_key(KEY)
    expect(ui.page.locator("#connection")).to_have_text("key accepted")
    assert notice.is_hidden() and ui.page.locator("#api-key.invalid").count() == 0
    assert ui.page.evaluate("sessionStorage.getItem('hxd2.apiKey')") == KEY


def test_a_question_streams_its_answer_references_trace_and_graph(ui):
    page = ui.page
    ui.open()
    ui.use_key(KEY)
    page.wait_for_selector("#stats .tile")  # the index's statistics
    assert "entities" in page.inner_text("#stats")
    # Every length the answer had while it streamed, as the page showed it.
    page.evaluate("""() => {
        window.answerLengths = [];
        const answer = document.getElementById('answer');
        new MutationObserver(() => window.answerLengths.push(answer.textContent.length))
            .observe(answer, {childList: true, characterData: true, subtree: true});
    }""")
    page.fill("#question", QUESTION)
    page.click("#ask")
    page.wait_for_selector("#answer.done")
    lengths = [n for n in page.evaluate("window.answerLengths") if n]
    text = page.inner_text("#answer")
    assert text.startswith("Scripted logic-form answer to: Where does Robert Malenka work?"), text
    assert len(set(lengths)) >= 5 and lengths == sorted(lengths), lengths  # it grew, word by word
    assert "done in" in page.inner_text("#answer-state")

    # The trace: the path and the timed stages.
    assert "logic_form" in page.inner_text("#trace")
    assert page.locator("#trace .stage").count() >= 3

    # A reference opens and shows its chunk's text.
    reference = page.locator("#references .reference", has_text="Robert Malenka")
    reference.locator("button.chip").first.click()
    page.wait_for_selector("#reader[open]")
    assert "Robert Malenka studies synaptic transmission" in page.inner_text("#reader-text")
    page.click("#reader-close")

    # The graph around the entities the answer used is drawn, and an entity opens.
    page.wait_for_selector("#graph g.node >> nth=1")
    assert page.locator("#graph line.edge").count() >= 1
    page.locator("#graph g.node.centre").first.click()
    assert "Robert Malenka" in page.inner_text("#graph-detail")
    if os.environ.get("HXD2_UI_SCREENSHOT"):  # for a person to look at the page
        page.screenshot(path=os.environ["HXD2_UI_SCREENSHOT"], full_page=True)
