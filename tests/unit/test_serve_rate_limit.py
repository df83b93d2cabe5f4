"""A request-rate limit per API key: each key its own bucket; over it, 429 with Retry-After, before any work."""

from __future__ import annotations

import dataclasses

from serve.auth import ApiKeys
from serve.rate_limit import KeyRateLimiter, retry_after_header
from tests.unit.test_progress import FakeClock
from tests.unit.test_serve_auth import KEY, OTHER, SETTINGS, FakeBackend, chat_body, client, run


def test_bucket_allows_a_burst_then_the_rate_and_refills_with_time():
    clock = FakeClock()
    limiter = KeyRateLimiter(rate_per_s=2.0, burst=3, clock=clock)
    assert [limiter.admit(0) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = limiter.admit(0)
    assert wait == 0.5  # one token at 2/s
    assert limiter.admit(1) == 0.0  # another key has its own bucket
    clock.now += 0.5
    assert limiter.admit(0) == 0.0 and limiter.admit(0) > 0
    clock.now += 100  # refills up to the burst, not beyond
    assert [limiter.admit(0) for _ in range(4)][-1] > 0
    assert retry_after_header(0.01) == "1" and retry_after_header(1.2) == "2"


def test_key_match_names_the_key_that_matched():
    keys = ApiKeys([KEY, OTHER])
    assert keys.match(KEY) == 0 and keys.match(OTHER) == 1
    assert keys.match("nope") is None and keys.match(None) is None and keys.match("") is None


def test_a_key_over_its_rate_gets_429_with_retry_after_and_no_work_is_done():
    backend = FakeBackend()
    settings = dataclasses.replace(SETTINGS, rate_limit_per_key=0.5, rate_limit_burst=2)

    async def go() -> None:
        async with client(backend, settings=settings) as c:
            codes = [(await c.post("/v1/chat/completions", json=chat_body())).status_code for _ in range(2)]
            assert codes == [200, 200]
            answered = len(backend.calls)
            r = await c.post("/v1/chat/completions", json=chat_body())
            assert r.status_code == 429 and r.headers["retry-after"] == "2"
            assert r.json()["error"]["code"] == "rate_limit_exceeded" and KEY not in r.text
            assert len(backend.calls) == answered  # refused before the backend saw it
        async with client(backend, settings=settings, key=OTHER) as other:
            assert (await other.post("/v1/chat/completions", json=chat_body())).status_code == 200
        async with client(backend, settings=settings, key=None) as anonymous:
            assert (await anonymous.get("/healthz")).status_code == 200  # open routes are not counted

    run(go())
