"""Issue 35, the front door under faults: an Ingress replica killed under load.

Two Ingress replicas behind Serve's proxy, which runs the front door (``serve/front_door.py``, installed through
``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH`` as ``hxd2 serve`` does). Queries arrive open loop, each with a
deadline; one Ingress replica is killed by its actor id in the middle. What must hold: no 500 (the requests the
dead replica held end as a JSON 503 with ``Retry-After``), no answer later than its deadline + 2 s, and Serve is
back to two Ingress replicas within 30 s.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any, Iterator

import httpx
import pytest

from tests.integration.tiny_app import served_tiny_app

pytestmark = pytest.mark.integration

APP = "frontdoor"
KEY = "sk-front-door-test-8Qw2"
DEADLINE_S = 4.0
BURST = 12  # queries sent at once just before the kill
RATE = 8.0  # queries per second: below the capacity (8 pipeline threads, 0.4 s of scripted LLM time a query)
SECONDS = float(os.environ.get("HXD2_FRONT_DOOR_SECONDS", "10"))
QUESTIONS = ("Where does Robert Malenka work?", "Which prize did Thomas Südhof win?", "What does Brian Kobilka study?")


@pytest.fixture(scope="module")
def base(ray_local, tmp_path_factory) -> Iterator[str]:
    with served_tiny_app(
        tmp_path_factory.mktemp("front_door"),
        APP,
        KEY,
        pipeline_threads=8,
        scripted={"delay_s": 0.2},
        deployment_options={
            "Ingress": {"num_replicas": 2, "max_ongoing_requests": 64, "ray_actor_options": {"num_cpus": 0.1}},
            "Retriever": {"num_replicas": 1, "max_ongoing_requests": 32, "ray_actor_options": {"num_cpus": 0.2}},
            "LLM": {"max_ongoing_requests": 128, "ray_actor_options": {"num_cpus": 0.1}},
        },
    ) as url:
        yield url


def _ingress_replicas() -> set[str]:
    import ray

    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if f"{APP}#Ingress#" in a["name"]}


def test_the_proxy_stamps_the_arrival_and_a_clients_own_stamp_is_replaced(base: str) -> None:
    headers = {"Authorization": f"Bearer {KEY}", "x-hxd2-deadline-s": "5", "x-hxd2-arrived": "1.0"}
    r = httpx.post(f"{base}/v1/query", json={"question": QUESTIONS[0], "mode": "dual"}, headers=headers, timeout=30)
    # Had the Ingress read the client's stamp, the deadline would have passed in 1970: a 504 at once.
    assert r.status_code == 200, r.text


Result = tuple[int, float, str, "str | None", str]  # status, seconds, content type, Retry-After, error code


async def _post(client: httpx.AsyncClient, i: int) -> Result:
    t0 = time.monotonic()
    try:
        r = await client.post("/v1/query", json={"question": QUESTIONS[i % 3], "mode": "dual"})
    except httpx.HTTPError as exc:  # a dropped connection is a failure the test reports
        return -1, time.monotonic() - t0, type(exc).__name__, None, ""
    seconds, content_type = time.monotonic() - t0, r.headers.get("content-type", "")
    code = r.json().get("error", {}).get("code", "") if r.status_code != 200 and "json" in content_type else ""
    return r.status_code, seconds, content_type, r.headers.get("retry-after"), code


async def _open_loop(base: str, on_the_way: threading.Event) -> list[Result]:
    headers = {"Authorization": f"Bearer {KEY}", "x-hxd2-deadline-s": str(DEADLINE_S)}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:

        async def one(i: int, at: float) -> Result:
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            return await _post(client, i)

        start = time.monotonic() + 0.2
        n = int(RATE * SECONDS)
        on_the_way.set()
        return list(await asyncio.gather(*(one(i, start + i / RATE) for i in range(n))))


async def _burst(base: str) -> list[Result]:
    """BURST queries at once: both Ingress replicas hold some of them when one is killed a moment later."""
    headers = {"Authorization": f"Bearer {KEY}", "x-hxd2-deadline-s": str(DEADLINE_S)}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:
        return list(await asyncio.gather(*(_post(client, i) for i in range(BURST))))


def test_an_ingress_replica_killed_under_load_gives_no_500_and_no_late_answer(base: str) -> None:
    import ray

    victims = _ingress_replicas()
    assert len(victims) == 2
    results: list[Any] = []
    started = threading.Event()
    loader = threading.Thread(target=lambda: results.extend(asyncio.run(_open_loop(base, started))))
    loader.start()
    started.wait(30)
    time.sleep(SECONDS / 3)
    # A burst just before the kill, so the victim surely holds requests (the open loop alone keeps about 3 in
    # flight across both replicas: a kill between two of them would show no 503 at all).
    burst = threading.Thread(target=lambda: results.extend(asyncio.run(_burst(base))))
    burst.start()
    time.sleep(0.3)
    ray.kill(ray.get_actor(sorted(victims)[0], namespace="serve"), no_restart=True)
    loader.join(timeout=SECONDS + DEADLINE_S + 60)
    burst.join(timeout=DEADLINE_S + 60)
    assert not loader.is_alive() and not burst.is_alive(), "requests hung after the Ingress replica died"
    statuses = [s for s, _, _, _, _ in results]
    counts = {s: statuses.count(s) for s in sorted(set(statuses))}
    slowest = max(t for _, t, _, _, _ in results)
    print(f"\nIngress killed under load: {counts} of {len(results)}; slowest {slowest:.2f} s")
    assert set(statuses) <= {200, 503, 504}, counts
    assert statuses.count(200) >= len(results) // 2, counts
    for status, _, content_type, retry_after, _ in results:
        if status == 503:
            assert content_type.startswith("application/json") and retry_after, (content_type, retry_after)
    # The kill was seen: requests the dead replica held were answered by the front door (issue 40, item 5), not
    # only an overload's 503 from the live one.
    lost = [r for r in results if r[0] == 503 and r[4] == "replica_lost"]
    assert len(lost) >= 1, (counts, sorted({r[4] for r in results if r[4]}))
    assert slowest <= DEADLINE_S + 2, "an answer came later than its deadline + 2 s"
    replaced_by = time.monotonic() + 30
    while True:
        current = _ingress_replicas()
        if len(current) == 2 and current != victims:
            break
        assert time.monotonic() < replaced_by, f"not back to two Ingress replicas within 30 s: {current}"
        time.sleep(0.5)
