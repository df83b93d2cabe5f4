"""Issue 33, admission and deadlines: the served app at twice its measured capacity.

The LLM is the scripted one with a fixed time per call (``scripted.delay_s``), so a query costs a known amount of
waiting and what is measured is the service's own admission and queueing. First its open-loop capacity, in the
same run: queries sent at fixed rates whatever the answers do (as the overload is), the highest rate of which at
least 95% are answered within the deadline and before the sending stops; a closed loop of as many queries in flight
as the Retriever runs at once only seeds the rates tried. Then an open-loop load at twice that capacity, each query
with a 3 s deadline (``x-hxd2-deadline-s``). What must hold: no status but 200, 503 and 504; every response within
its deadline + 2 s; the 503s answered at once (p99 < 1 s, with ``Retry-After``); and the goodput (answers within
their deadline and before the sending stops, per second of sending) a large share of the capacity. The ceiling is
the capacity itself: the service cannot answer faster under overload than at the best rate it keeps up with, so
goodput is stated as a share of it. ``HXD2_OVERLOAD_SECONDS=60`` runs the long form (the figures in
docs/benchmarks/serving.md); CI runs 15 s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
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
) -> list[tuple[int, float, str | None, str | None, bool]]:
    """Queries sent at ``rate`` per second for ``seconds`` whatever the answers do: (status, seconds, Retry-After,
    the error's code, whether the response came before the sending stopped)."""
    headers = {"Authorization": f"Bearer {KEY}", "x-hxd2-deadline-s": str(deadline_s)}
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=200)
    start = time.monotonic() + 0.5
    window_end = start + seconds
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60, limits=limits) as client:

        async def one(i: int, at: float) -> tuple[int, float, str | None, str | None, bool]:
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            t0 = time.monotonic()
            r = await client.post("/v1/query", json={"question": QUESTIONS[i % 3], "mode": mode})
            code = None if r.status_code == 200 else str((r.json().get("error") or {}).get("code"))
            done = time.monotonic()
            return r.status_code, done - t0, r.headers.get("retry-after"), code, done <= window_end

        n = int(rate * seconds)
        return list(await asyncio.gather(*(one(i, start + i / rate) for i in range(n))))


def _goodput(results: list[tuple[int, float, str | None, str | None, bool]], seconds: float) -> float:
    """Answers within their deadline that came before the sending stopped, per second of sending."""
    return sum(1 for s, t, _, _, in_window in results if s == 200 and t <= DEADLINE_S and in_window) / seconds


def _open_loop_capacity(base: str, seed: float, seconds: float = 6.0) -> tuple[float, list[str]]:
    """The highest of a few rates around ``seed`` at which the service answers >= 95% of an open-loop load within
    the deadline; the rates tried, for the printout."""
    best, tried = 0.0, []
    for share in (0.6, 0.8, 1.0, 1.2):
        rate = share * seed
        results = asyncio.run(_open_loop(base, rate, seconds))
        in_time = sum(1 for s, t, *_ in results if s == 200 and t <= DEADLINE_S) / max(1, len(results))
        tried.append(f"{rate:.1f}/s: {in_time:.0%} in time")
        if in_time >= 0.95:
            best = max(best, rate)
    return best, tried


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def test_twice_the_capacity_sheds_load_at_once_and_keeps_deadlines(base: str) -> None:
    asyncio.run(_closed_loop(base, ONGOING, 3))  # warm-up: the replicas' first queries, and admission's evidence
    closed = asyncio.run(_closed_loop(base, ONGOING, 8))
    capacity, tried = _open_loop_capacity(base, closed)
    assert capacity > 0, tried
    results = asyncio.run(_open_loop(base, 2 * capacity, SECONDS))
    statuses = [s for s, *_ in results]
    counts = {s: statuses.count(s) for s in sorted(set(statuses))}
    ok = [t for s, t, *_ in results if s == 200]
    refused = [t for s, t, *_ in results if s == 503]
    goodput = _goodput(results, SECONDS)
    print(
        f"\nclosed-loop {closed:.1f}/s; open-loop capacity {capacity:.1f}/s ({'; '.join(tried)}); {len(results)} "
        f"queries at {2 * capacity:.1f}/s for {SECONDS:.0f} s (deadline {DEADLINE_S:.0f} s): {counts}; goodput "
        f"{goodput:.1f}/s ({goodput / capacity:.0%} of the open-loop capacity, the ceiling); 200 p50/p99 "
        f"{_p(ok, 0.5):.2f}/{_p(ok, 0.99):.2f} s; 503 p99 {_p(refused, 0.99):.3f} s; "
        f"slowest {max(t for _, t, *_ in results):.2f} s"
    )
    assert set(statuses) <= {200, 503, 504}, counts
    assert max(t for _, t, *_ in results) <= DEADLINE_S + 2, "a response came later than its deadline + 2 s"
    assert refused and _p(refused, 0.99) < 1.0, "overload was not refused at once"
    assert all(r for s, _, r, *_ in results if s == 503), "a 503 without Retry-After"
    # The queue waits in the Retriever replica, not in Serve's router (serve/app.py).
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
    here, a query arriving while the replica is being replaced waits for it, within its deadline, or is refused at
    once when the queue behind the outage grows past what its deadline allows. Never a 500, a hang or an answer
    after the deadline + 2 s; at least 60% answered; each deployment has its replica back within 30 s."""
    before = _replica_failures(ray_metrics_url)
    seconds = len(KILLED) * (12 + KILL_GAP_S)  # what the kills take, each replacement 4-8 s here
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        kills = pool.submit(lambda: (time.sleep(2.0), _kill_in_turn())[1])
        results = asyncio.run(_open_loop(base, KILL_RATE, seconds, mode="auto", deadline_s=KILL_DEADLINE_S))
        replaced = kills.result(timeout=120)
    statuses = [s for s, *_ in results]
    counts = {s: statuses.count(s) for s in sorted(set(statuses))}
    codes = Counter(f"{s} {c}" for s, _, _, c, _ in results if s != 200)
    slowest = max(t for _, t, *_ in results)
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
        + "; answered per 5 s of sending: "
        + " ".join(
            str(statuses[i : i + int(5 * KILL_RATE)].count(200)) for i in range(0, len(statuses), int(5 * KILL_RATE))
        )
    )
    assert set(statuses) <= {200, 503, 504}, counts
    assert slowest <= KILL_DEADLINE_S + 2, "an answer came later than its deadline + 2 s"
    assert all(r for s, _, r, *_ in results if s == 503), "a 503 without Retry-After"
    # Each lost replica is found by Serve's health check within HEALTH_CHECK_PERIOD_S, then replaced: measured 126 to
    # 149 of 180 answered here (71 to 85 with Serve's 10 s default, when the outages outlasted the deadline).
    assert statuses.count(200) >= 0.6 * len(results), counts
    assert all(s <= 30 for s in replaced.values()), replaced
    # The endpoint's metrics show the losses the queries met. The Retriever's always meets some (every query reads
    # through it); a part's or the LLM's replica may die between calls, and then no call finds it gone (in CI once:
    # Planner 0, LLM 0), so those are printed, not asserted.
    assert lost["Retriever"] >= 1, lost


# Issue 43, item 4: a burst. Every request at once, each with a 3 s deadline; the front door in the proxy bounds its
# queue (serve/front_door.py), the Ingress admits what it can answer in time.
BURST = int(os.environ.get("HXD2_BURST_REQUESTS", "300"))


async def _raw_post(host: str, port: int, body: bytes, headers: str) -> tuple[int, float, str | None]:
    """One POST /v1/query on its own connection, written and read with plain asyncio streams: the client of a
    burst must cost little, or on 2 cores its own work is what the clock measures."""
    t0 = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"POST /v1/query HTTP/1.1\r\nHost: {host}\r\n{headers}Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    raw = await reader.read()
    took = time.monotonic() - t0
    writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    code = None
    if status != 200:
        try:
            code = str(json.loads(payload).get("error", {}).get("code"))
        except ValueError:
            code = "not_json"
    return status, took, code


def test_a_burst_of_300_at_once_keeps_every_deadline(base: str) -> None:
    host, port = base.removeprefix("http://").split(":")
    headers = f"Authorization: Bearer {KEY}\r\nx-hxd2-deadline-s: {DEADLINE_S}\r\n"

    async def burst() -> list[tuple[int, float, str | None]]:
        bodies = [json.dumps({"question": QUESTIONS[i % 3], "mode": "dual"}).encode() for i in range(BURST)]
        return list(await asyncio.gather(*(_raw_post(host, int(port), b, headers) for b in bodies)))

    asyncio.run(_closed_loop(base, ONGOING, 3))  # the service has answered before: the proxy knows its rate
    results = asyncio.run(burst())
    codes = Counter(f"{s} {c}" if c else str(s) for s, _, c in results)
    times = sorted(t for _, t, _ in results)
    refused = [t for s, t, _ in results if s == 503]
    ok = [t for s, t, _ in results if s == 200]
    print(
        f"\nburst of {BURST} at once (deadline {DEADLINE_S:g} s): {dict(codes)}; all p50/p90/p99/max "
        f"{_p(times, 0.5):.2f}/{_p(times, 0.9):.2f}/{_p(times, 0.99):.2f}/{times[-1]:.2f} s; 200 p50/max "
        f"{_p(ok, 0.5):.2f}/{max(ok, default=0):.2f} s; 503 p50/p99 {_p(refused, 0.5):.3f}/{_p(refused, 0.99):.3f} s"
    )
    assert {s for s, _, _ in results} <= {200, 503, 504}, codes
    assert times[-1] <= DEADLINE_S + 1, "an answer came later than its deadline + 1 s on the client's clock"
    assert refused and _p(refused, 0.99) < 1.0, "the burst's 503s were not answered at once"
    assert ok, "the burst answered nothing"
