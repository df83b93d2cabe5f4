"""One index served from S3 by a real two-node Ray cluster, each node reading its own copy.

The second node is started in its own mount namespace with a private folder over the cache path
(:class:`tests.integration.ray_cluster.TwoNodeCluster`), the way a node-local disk at the same path looks on a real
cluster. The Retriever runs two replicas, at most one per node; each opens the index from S3 into its node's cache
(``retrieval.cache_dir``), so both caches end up holding a complete copy, and both replicas answer. The driver is
its own process (this session's Ray may already be running here).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from tests.integration.ray_cluster import TwoNodeCluster, can_unshare_mounts
from tests.unit.retrieval_fixtures import DIM, build_tiny_index

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not can_unshare_mounts(), reason="needs mount namespaces (unshare -m) for a node-local cache"),
]

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = ["Where does Robert Malenka work?", "Which prize did Thomas Südhof win?"]

# The driver: the app on the cluster (the proxy on the head only: both nodes share this machine's loopback), the
# Retriever twice with at most one replica per node, then questions over HTTP and where each replica ran.
DRIVER = textwrap.dedent(
    """
    import json, sys, time, httpx, ray
    from ray import serve
    from serve.app import build_app

    address, index, endpoint, cache, port = sys.argv[1:6]
    ray.init(address=address, runtime_env={"env_vars": {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true",
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}})
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": int(port)})
    small = lambda cpus, **extra: {"ray_actor_options": {"num_cpus": cpus}, **extra}
    app = build_app({
        "indexes": {"tiny": index},
        "config_data": {
            "llm": {"backend": "scripted"},
            "embedding": {"backend": "hashing", "dim": %(dim)d},
            "retrieval": {"context_length": 4096, "answer_reserve_tokens": 1024, "cache_dir": cache},
            "s3": {"endpoint_url": endpoint},
        },
        "auth": False,
        "parts": "in_replica",
        "embedder": "in_replica",
        "deployment_options": {
            "Ingress": small(0.1),
            "Retriever": small(0.2, num_replicas=2, max_replicas_per_node=1),
            "LLM": small(0.1),
        },
    })
    started = time.monotonic()
    serve.run(app, name="two-nodes", route_prefix="/")
    ready_s = time.monotonic() - started
    answers = []
    for question in %(questions)r * 3:
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/query", json={"question": question}, timeout=60)
        body = reply.json()
        answers.append({"status": reply.status_code, "references": body.get("references", [])})
    replicas = serve.status().applications["two-nodes"].deployments["Retriever"].replica_states
    print("RESULT " + json.dumps({"ready_s": ready_s, "answers": answers, "retriever_replicas": replicas}))
    serve.shutdown()
    """
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("node_cache") / "index-cache"


@pytest.fixture(scope="module")
def cluster(cache):
    started = TwoNodeCluster(second_node_resources={"second_node": 1}, head_cpus=2, node_local=[cache]).start()
    try:
        yield started
    finally:
        started.stop()
        assert started.processes() == []


def test_one_index_from_s3_is_served_by_both_nodes_each_from_its_own_copy(cluster, cache, s3_server, tmp_path):
    import boto3
    import pyarrow.fs as pafs

    from tests.integration.servers import free_port

    root = build_tiny_index(tmp_path / "index").root
    bucket = f"two-nodes-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket=bucket)
    fs = pafs.S3FileSystem(endpoint_override=s3_server.removeprefix("http://"), scheme="http", region="us-east-1")
    pafs.copy_files(str(root), f"{bucket}/tiny", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)

    script = DRIVER % {"dim": DIM, "questions": QUESTIONS}
    args = [cluster.address, f"s3://{bucket}/tiny", s3_server, str(cache), str(free_port())]
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env={**cluster.env(), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")] or [done.stdout[-2000:]]
    result = json.loads(line.removeprefix("RESULT "))
    print(f"\ntwo nodes: ready {result['ready_s']:.1f} s after serve.run; Retriever {result['retriever_replicas']}")

    assert all(a["status"] == 200 and a["references"] for a in result["answers"]), result["answers"]
    assert result["retriever_replicas"] == {"RUNNING": 2}
    # Each node's cache holds one complete copy (the manifest is copied last): the head's at the real path, the
    # second node's in the private folder its processes saw at the same path. Only a Retriever replica opens the
    # index, at most one per node: so one ran on each node.
    second = Path(cluster.private[str(cache)])
    for node_cache in (cache, second):
        copies = [entry for entry in node_cache.iterdir() if not entry.name.startswith(".")]
        assert len(copies) == 1, (node_cache, sorted(p.name for p in node_cache.iterdir()))
        assert (copies[0] / "manifest.json").exists()
    head_copy = next(p for p in cache.iterdir() if not p.name.startswith("."))
    assert (second / head_copy.name / "manifest.json").exists()  # the same cache entry: one build, one generation
