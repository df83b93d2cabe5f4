"""Issue 33, admission and deadlines: the served app at twice its measured capacity.

The LLM is the scripted one with a fixed time per call (``scripted.delay_s``), so a query costs a known amount of
waiting and what is measured is the service's own admission and queueing. First its capacity: answers per second
with as many queries in flight as the Retriever runs at once. Then an open-loop load at twice that rate, each
query with a 3 s deadline (``x-hxd2-deadline-s``). What must hold: no status but 200, 503 and 504; every response
within its deadline + 2 s; the 503s answered at once (p99 < 1 s, with ``Retry-After``); and the goodput (answers
within their deadline per second) a large share of the capacity. ``HXD2_OVERLOAD_SECONDS=60`` runs the long form
(the figures in docs/benchmarks/serving.md); CI runs 15 s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import os
import time
from collections import Counter
from typing import Iterator

import httpx
import pytest

from tests.integration.tiny_app import served_tiny_app

pytestmark = pytest.mark.integration

APP = "overload"
KEY = "sk-overload-test-3Jd8"
DELAY_S = 0.25  # per scripted LLM call: a dual-mode query makes two (keywords, answer)
ONGOING = 8  # queries a Retriever replica runs at once
DEADLINE_S = 3.0
SECONDS = float(os.environ.get("HXD2_OVERLOAD_SECONDS", "15"))
QUESTIONS = ("Where does Robert Malenka work?", "Which prize did Thomas Südhof win?", "What does Brian Kobilka study?")


@pytest.fixture(scope="module")
def base(ray_local, tmp_path_factory) -> Iterator[str]:
    with served_tiny_app(
        tmp_path_factory.mktemp("overload"),
        APP,
        KEY,
        pipeline_threads=ONGOING,
        scripted={"delay_s": DELAY_S},
        deployment_options={
            "Ingress": {"num_replicas": 1, "max_ongoing_requests": 512, "max_queued_requests": 512},
            "Retriever": {"num_replicas": 1, "max_ongoing_requests": 4 * ONGOING, "max_queued_requests": 256},
            "LLM": {"max_ongoing_requests": 256},
        },
    ) as url:
        yield url


async def _closed_loop(base: str, concurrency: int, seconds: float) -> float:
    """Answers per second with ``concurrency`` queries always in flight (no deadline pressure)."""
    answered = 0
    stop = time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:

        async def worker(i: int) -> None:
            nonlocal answered
            while time.monotonic() < stop:
                r = await client.post("/v1/query", json={"question": QUESTIONS[i % 3], "mode": "dual"})
                answered += r.status_code == 200

        started = time.monotonic()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        return answered / (time.monotonic() - started)


async def _open_loop(
    base: str, rate: float, seconds: float, mode: str = "dual", deadline_s: float = DEADLINE_S
) -> list[tuple[int, float, str | None, str | None]]:
    """Queries sent at ``rate`` per second for ``seconds`` whatever the answers do: (status, seconds, Retry-After,
    the error's code)."""
    headers = {"Authorization": f"Bearer {KEY}", "x-hxd2-deadline-s": str(deadline_s)}
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=200)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60, limits=limits) as client:

        async def one(i: int, at: float) -> tuple[int, float, str | None, str | None]:
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            t0 = time.monotonic()
            r = await client.post("/v1/query", json={"question": QUESTIONS[i % 3], "mode": mode})
            code = None if r.status_code == 200 else str((r.json().get("error") or {}).get("code"))
            return r.status_code, time.monotonic() - t0, r.headers.get("retry-after"), code

        start = time.monotonic() + 0.5
        n = int(rate * seconds)
        return list(await asyncio.gather(*(one(i, start + i / rate) for i in range(n))))


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def test_twice_the_capacity_sheds_load_at_once_and_keeps_deadlines(base: str) -> None:
    asyncio.run(_closed_loop(base, ONGOING, 3))  # warm-up: the replicas' first queries, and admission's evidence
    capacity = asyncio.run(_closed_loop(base, ONGOING, 8))
    results = asyncio.run(_open_loop(base, 2 * capacity, SECONDS))
    statuses = [s for s, _, _, _ in results]
    counts = {s: statuses.count(s) for s in sorted(set(statuses))}
    ok = [t for s, t, _, _ in results if s == 200]
    refused = [t for s, t, _, _ in results if s == 503]
    goodput = sum(1 for t in ok if t <= DEADLINE_S) / SECONDS
    print(
        f"\ncapacity {capacity:.1f}/s; {len(results)} queries at {2 * capacity:.1f}/s for {SECONDS:.0f} s "
        f"(deadline {DEADLINE_S:.0f} s): {counts}; goodput {goodput:.1f}/s ({goodput / capacity:.0%} of capacity); "
        f"200 p50/p99 {_p(ok, 0.5):.2f}/{_p(ok, 0.99):.2f} s; 503 p99 {_p(refused, 0.99):.3f} s; "
        f"slowest {max(t for _, t, _, _ in results):.2f} s"
    )
    assert set(statuses) <= {200, 503, 504}, counts
    assert max(t for _, t, _, _ in results) <= DEADLINE_S + 2, "a response came later than its deadline + 2 s"
    assert refused and _p(refused, 0.99) < 1.0, "overload was not refused at once"
    assert all(r for s, _, r, _ in results if s == 503), "a 503 without Retry-After"
    # Measured 107% (60 s): the queue waits in the Retriever replica, not in Serve's router (serve/app.py).
    assert goodput >= 0.8 * capacity, (goodput, capacity)


# The lost-replica part of the same load test (issue 33, item 2): each deployment the multi-stage flow calls loses
# its one replica in turn while `auto` queries keep arriving.
KILLED = ("Retriever", "Planner", "Verifier", "LLM")
KILL_RATE = 3.0  # queries per second: an `auto` query makes five LLM calls, so well below the capacity
KILL_DEADLINE_S = 10.0
KILL_GAP_S = 3.0  # after a replacement, before the next kill


def _replicas(deployment: str) -> set[str]:
    import ray

    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if f"{APP}#{deployment}#" in a["name"]}


def _kill_in_turn() -> dict[str, float]:
    """Kills one replica of each deployment by its actor id, each once the one before was replaced; seconds from
    each kill to its replacement (inf: none within 30 s)."""
    import ray

    replaced: dict[str, float] = {}
    for deployment in KILLED:
        victims = _replicas(deployment)
        assert victims, deployment
        ray.kill(ray.get_actor(sorted(victims)[0], namespace="serve"), no_restart=True)
        killed_at = time.monotonic()
        while not (_replicas(deployment) - victims) and time.monotonic() < killed_at + 30:
            time.sleep(0.25)
        replaced[deployment] = time.monotonic() - killed_at if _replicas(deployment) - victims else math.inf
        time.sleep(KILL_GAP_S)
    return replaced


def _replica_failures(metrics_url: str) -> dict[str, float]:
    import urllib.request

    from jobs.job_metrics import metric_value, parse_prometheus

    with urllib.request.urlopen(metrics_url, timeout=10) as resp:
        samples = parse_prometheus(resp.read().decode("utf-8"))
    return {
        target: sum(
            metric_value(samples, name, target=target)
            for name in ("ray_hxd2_replica_failures", "ray_hxd2_replica_failures_total")
        )
        for target in KILLED
    }


def test_a_replica_of_each_deployment_killed_in_turn_under_load(base: str, ray_metrics_url: str) -> None:
    """A query on a replica that dies is retried on another replica when it is a read (the Retriever's, by the
    Ingress), falls back without the step when it is a part's (a lost planner or verifier call), and otherwise ends
    as a clean 503 with Retry-After (a lost LLM call: a generation is not retried inside). With one replica of each
    here, a query arriving while the replica is being replaced waits for it, within its deadline. Never a 500, a
    hang or an answer after the deadline + 2 s; each deployment has its replica back within 30 s."""
    before = _replica_failures(ray_metrics_url)
    seconds = len(KILLED) * (12 + KILL_GAP_S)  # what the kills take, each replacement ~8 s here
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        kills = pool.submit(lambda: (time.sleep(2.0), _kill_in_turn())[1])
        results = asyncio.run(_open_loop(base, KILL_RATE, seconds, mode="auto", deadline_s=KILL_DEADLINE_S))
        replaced = kills.result(timeout=120)
    statuses = [s for s, _, _, _ in results]
    counts = {s: statuses.count(s) for s in sorted(set(statuses))}
    codes = Counter(f"{s} {c}" for s, _, _, c in results if s != 200)
    slowest = max(t for _, t, _, _ in results)
    lost: dict[str, float] = {}
    shown_by = time.monotonic() + 60  # Ray's metrics agent exports every few seconds
    while time.monotonic() < shown_by:
        now = _replica_failures(ray_metrics_url)
        lost = {target: now[target] - before[target] for target in KILLED}
        if lost["Retriever"] >= 1:
            break
        time.sleep(1.0)
    print(
        f"\nkilled in turn under {KILL_RATE:g} auto queries/s: {counts} of {len(results)}; slowest {slowest:.2f} s "
        f"(deadline {KILL_DEADLINE_S:g} s); replaced after "
        + ", ".join(f"{d} {s:.1f} s" for d, s in replaced.items())
        + "; replica failures counted: "
        + ", ".join(f"{d} {n:g}" for d, n in lost.items())
        + f"; errors: {dict(codes)}"
    )
    assert set(statuses) <= {200, 503, 504}, counts
    assert slowest <= KILL_DEADLINE_S + 2, "an answer came later than its deadline + 2 s"
    assert all(r for s, _, r, _ in results if s == 503), "a 503 without Retry-After"
    assert statuses.count(200) >= len(results) // 2, counts
    assert all(s <= 30 for s in replaced.values()), replaced
    # The endpoint's metrics show the losses the queries met. The Retriever's always meets some (every query reads
    # through it); a part's or the LLM's replica may die between calls, and then no call finds it gone (in CI once:
    # Planner 0, LLM 0), so those are printed, not asserted.
    assert lost["Retriever"] >= 1, lost
