"""The proxy's own 504 against a real Serve app (issue 40, item 5; the unit tests drive the front door over a fake
ASGI app only).

One Ingress replica that takes one request at a time, held by a slow query: the next request waits in Serve's
proxy for a free replica and never reaches an Ingress. The front door in the proxy (``serve/front_door.py``)
answers it a JSON 504 at its deadline + ``GRACE_S`` (0.5 s), so no answer comes later than that; the slow query
is unharmed.
"""

from __future__ import annotations

import threading
import time
from typing import Iterator

import httpx
import pytest

from serve.front_door import GRACE_S
from tests.integration.tiny_app import served_tiny_app

pytestmark = pytest.mark.integration

APP = "proxydeadline"
KEY = "sk-proxy-deadline-4Tz9"
SLOW_S = 3.0  # the scripted LLM sleeps this long before every completion
DEADLINE_S = 0.5


@pytest.fixture(scope="module")
def base(ray_local, tmp_path_factory) -> Iterator[str]:
    with served_tiny_app(
        tmp_path_factory.mktemp("proxy_deadline"),
        APP,
        KEY,
        scripted={"delay_s": SLOW_S},
        deployment_options={
            "Ingress": {"num_replicas": 1, "max_ongoing_requests": 1, "ray_actor_options": {"num_cpus": 0.1}},
            "Retriever": {"ray_actor_options": {"num_cpus": 0.2}},
            "LLM": {"ray_actor_options": {"num_cpus": 0.1}},
        },
    ) as url:
        yield url


def test_a_request_waiting_in_the_proxy_gets_the_proxys_json_504_by_its_deadline_plus_two(base: str) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    slow: list[httpx.Response] = []

    def hold_the_ingress() -> None:
        slow.append(
            httpx.post(
                f"{base}/v1/query",
                json={"question": "Where does Robert Malenka work?", "mode": "dual"},
                headers={**auth, "x-hxd2-deadline-s": "30"},
                timeout=60,
            )
        )

    holder = threading.Thread(target=hold_the_ingress)
    holder.start()
    time.sleep(1.0)  # the first query holds the only Ingress slot (its first LLM call alone takes SLOW_S)
    t0 = time.monotonic()
    r = httpx.post(
        f"{base}/v1/query",
        json={"question": "Which prize did Thomas Südhof win?", "mode": "dual"},
        headers={**auth, "x-hxd2-deadline-s": str(DEADLINE_S)},
        timeout=60,
    )
    took = time.monotonic() - t0
    holder.join(timeout=60)
    print(f"\nproxy's 504 after {took:.2f} s (deadline {DEADLINE_S} s); the first query: {slow[0].status_code}")
    assert r.status_code == 504 and r.headers["content-type"].startswith("application/json"), r.text
    # The front door's answer (the proxy), not the Ingress's: the request never reached one.
    assert r.json()["error"]["code"] == "deadline_exceeded", r.text
    assert "before the service could answer" in r.json()["error"]["message"], r.text
    assert DEADLINE_S + GRACE_S - 0.1 <= took <= DEADLINE_S + GRACE_S + 1.0, took
    assert slow and slow[0].status_code == 200, slow[0].text if slow else "no answer"
