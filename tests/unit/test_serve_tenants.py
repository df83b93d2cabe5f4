"""Tenants on one endpoint (issue 43): keys scoped to their indexes, read from a keys file that changes while
served. The ingress app over fake backends, no Ray; every route is tried with every other tenant's key."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import httpx
import pytest
import yaml

from serve.api import ApiSettings, make_api
from serve.tenants import (
    KeysFileError,
    ReloadingKeys,
    TenantKeys,
    add_tenant_key,
    read_keys_file,
    revoke_tenant,
)
from tests.unit.test_serve_auth import FakeBackend, chat_body

INDEXES = ("alpha", "beta")
SETTINGS = ApiSettings(indexes=INDEXES, default_index="alpha", max_body_bytes=4096, max_question_chars=500)


class ViewsAndAnswers(FakeBackend):
    async def index_view(self, kind: str, index: str, params: dict[str, Any], deadline: float) -> dict[str, Any]:
        self.calls.append((index, kind, False))
        if kind == "stats":
            return {
                "index": index, "counts": {}, "degree": {}, "degree_histogram": [], "components": {},
                "top_entities": [], "entity_types": [], "build": {}, "manifest": {},
            }  # fmt: skip
        raise AssertionError(f"the test asks no {kind} of an allowed index")


@pytest.fixture
def keys_file(tmp_path):
    path = tmp_path / "keys.yaml"
    key_a = add_tenant_key(path, "team-a", ["alpha"], requests_per_minute=600)
    key_b = add_tenant_key(path, "team-b", ["beta"], concurrent=2, tokens_per_day=1000)
    return path, key_a, key_b


def _client(app: Any, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test", headers={"Authorization": f"Bearer {key}"}
    )


def test_the_keys_file_holds_digests_never_keys(keys_file):
    path, key_a, key_b = keys_file
    text = path.read_text()
    assert key_a not in text and key_b not in text and key_a[5:20] not in text
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    entries = read_keys_file(path)
    assert [(e["tenant"], e["indexes"]) for e in entries] == [("team-a", ["alpha"]), ("team-b", ["beta"])]
    assert entries[1]["concurrent"] == 2 and "requests_per_minute" not in entries[1]
    keys = ReloadingKeys(path).keys
    assert keys.match_tenant(key_a)[1].name == "team-a" and keys.match_tenant(key_b)[1].name == "team-b"
    assert keys.match_tenant("hxd2-nope") is None and keys.match_tenant(None) is None


def test_a_bad_keys_file_names_the_problem(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"tenants": [{"tenant": "x", "salt": "00" * 16, "digest": "11" * 32}]}))
    with pytest.raises(KeysFileError, match="'indexes' must be"):
        read_keys_file(bad)
    bad.write_text(yaml.safe_dump({"tenants": [{"tenant": "x", "key": "plain"}]}))
    with pytest.raises(KeysFileError, match="unknown keys \\['key'\\]"):
        read_keys_file(bad)
    with pytest.raises(KeysFileError, match="not found"):
        read_keys_file(tmp_path / "missing.yaml")


@pytest.mark.parametrize("route", ["models", "query", "chat", "chat_stream", "stats"])
def test_no_route_shows_another_tenants_index(keys_file, route):
    path, key_a, key_b = keys_file
    backend = ViewsAndAnswers()
    app = make_api(backend, SETTINGS, ReloadingKeys(path))

    async def call(key: str, index: str) -> httpx.Response:
        async with _client(app, key) as c:
            if route == "models":
                return await c.get("/v1/models")
            if route == "query":
                return await c.post("/v1/query", json={"question": "Who?", "index": index})
            if route == "chat":
                return await c.post("/v1/chat/completions", json=chat_body("Who?", model=index))
            if route == "chat_stream":
                return await c.post("/v1/chat/completions", json=chat_body("Who?", model=index, stream=True))
            return await c.get(f"/v1/indexes/{index}/stats")

    async def go() -> None:
        for key, own, other in ((key_a, "alpha", "beta"), (key_b, "beta", "alpha")):
            if route == "models":
                listed = [m["id"] for m in (await call(key, own)).json()["data"]]
                assert listed == [own]
                continue
            mine = await call(key, own)
            assert mine.status_code == 200, mine.text
            theirs = await call(key, other)
            missing = await call(key, "gamma")
            assert theirs.status_code == missing.status_code == 404
            # The same words as for an index nobody serves: only the name asked differs.
            assert theirs.json() == missing.json() | {
                "error": missing.json()["error"]
                | {"message": missing.json()["error"]["message"].replace("gamma", other)}
            }
            assert other not in theirs.json()["error"]["message"].replace(f"'{other}'", "")

    asyncio.run(go())
    # The backend was asked for each key's own index only, once per route: never for the other tenant's.
    asked = [index for index, *_ in backend.calls]
    assert sorted(asked) == ([] if route == "models" else ["alpha", "beta"])


def test_a_new_key_works_and_a_revoked_one_stops_within_the_poll(keys_file):
    path, key_a, key_b = keys_file
    keys = ReloadingKeys(path, poll_s=0.2)
    app = make_api(FakeBackend(), SETTINGS, keys)

    async def status(key: str) -> int:
        async with _client(app, key) as c:
            return (await c.get("/v1/models")).status_code

    async def go() -> None:
        assert await status(key_a) == 200
        assert revoke_tenant(path, "team-a") and not revoke_tenant(path, "team-a")
        key_c = add_tenant_key(path, "team-c", ["*"])
        started = time.monotonic()
        while await status(key_a) == 200:
            assert time.monotonic() - started < 5, "a revoked key still works"
            await asyncio.sleep(0.05)
        assert await status(key_c) == 200 and await status(key_b) == 200
        # A file that turns invalid keeps the keys read before in force.
        path.write_text("tenants: [1]\n")
        os.utime(path, (time.time() + 5, time.time() + 5))
        await asyncio.sleep(0.3)
        assert await status(key_c) == 200

    asyncio.run(go())


def test_plain_keys_are_one_tenant_that_sees_every_index():
    keys = TenantKeys.of_plain_keys(["sk-one", "sk-two"])
    position, tenant = keys.match_tenant("sk-two")
    assert position == 1 and tenant.indexes is None and tenant.visible(INDEXES) == list(INDEXES)


# ---------------------------------------------------------------------------------------- budgets and audit


def test_budgets_answer_429_naming_the_spent_one_and_the_audit_log_has_no_key(tmp_path):
    from serve.budgets import BudgetLedger, LocalBudgets
    from serve.tenant_gate import AuditLog

    path = tmp_path / "keys.yaml"
    key = add_tenant_key(path, "metered", ["alpha"], requests_per_minute=3, tokens_per_day=40)
    free = add_tenant_key(path, "free", ["beta"])
    clock = {"now": 1_000_000.0}
    ledger = BudgetLedger(clock=lambda: clock["now"])
    audit = AuditLog(str(tmp_path / "audit-{pid}.jsonl"))
    app = make_api(FakeBackend(), SETTINGS, ReloadingKeys(path), budgets=LocalBudgets(ledger), audit=audit)

    async def ask(key_: str, index: str) -> httpx.Response:
        async with _client(app, key_) as c:
            return await c.post("/v1/query", json={"question": "Who is Ada?", "index": index})

    async def go() -> None:
        # Each FakeBackend answer reports 13 tokens; the minute's 3 requests run out before the day's 40 tokens.
        statuses = [(await ask(key, "alpha")).status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        refused = await ask(key, "alpha")
        body = refused.json()["error"]
        assert body["code"] == "budget_exceeded" and body["budget"] == "requests_per_minute"
        assert "requests_per_minute" in body["message"] and int(refused.headers["retry-after"]) >= 1
        for _ in range(5):  # no budget: never counted
            assert (await ask(free, "beta")).status_code == 200
        clock["now"] += 61  # a new minute, the same day: 39 of 40 tokens spent, one more answer fits
        assert (await ask(key, "alpha")).status_code == 200
        tokens = await ask(key, "alpha")
        assert tokens.status_code == 429 and tokens.json()["error"]["budget"] == "tokens_per_day"
        clock["now"] += 86_400  # the next day
        assert (await ask(key, "alpha")).status_code == 200

    asyncio.run(go())
    audit.close()
    lines = [json.loads(line) for line in audit.path.read_text().splitlines()]
    assert {line["tenant"] for line in lines} == {"metered", "free"}
    assert [line["status"] for line in lines if line["tenant"] == "metered"][:5] == [200, 200, 200, 429, 429]
    first = lines[0]
    assert first["index"] == "alpha" and first["route"] == "/v1/query" and first["tokens"] == 13
    assert "question" not in first and key not in audit.path.read_text() and free not in audit.path.read_text()
    assert ledger.usage()["metered"]["running"] == 0  # every admitted request was released


def test_concurrent_budget_holds_while_requests_run():
    from serve.budgets import BudgetLedger

    ledger = BudgetLedger(clock=lambda: 0.0)
    limits = {"requests_per_minute": None, "concurrent": 2, "tokens_per_day": None}
    assert ledger.admit("t", limits) is None and ledger.admit("t", limits) is None
    assert ledger.admit("t", limits)["budget"] == "concurrent"
    ledger.release("t")
    assert ledger.admit("t", limits) is None


def test_keys_cli_prints_the_key_alone_once_and_lists_no_key(tmp_path, capsys):
    from jobs.cli import main

    path = tmp_path / "keys.yaml"
    argv = ["keys", "add", "--file", str(path), "--tenant", "t1", "--index", "alpha", "--concurrent", "4"]
    assert main(argv) == 0
    key = capsys.readouterr().out
    assert key.count("\n") == 1 and key.startswith("hxd2-") and len(key.strip()) > 40
    assert ReloadingKeys(path).match_tenant(key.strip())[1].concurrent == 4
    assert main(["keys", "list", "--file", str(path)]) == 0
    listed = capsys.readouterr().out
    assert "t1: alpha (concurrent 4)" in listed and key.strip() not in listed
    assert main(["keys", "revoke", "--file", str(path), "--tenant", "t1"]) == 0
    assert main(["keys", "revoke", "--file", str(path), "--tenant", "t1"]) == 2
