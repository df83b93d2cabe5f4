"""Shared integration fixtures: a local S3 server (moto) for the whole session.

``s3_server`` yields the endpoint URL and points the AWS credential chain at dummy keys for the session (boto3
and pyarrow both read them). It does not set ``AWS_ENDPOINT_URL``: code under test gets the endpoint through
``S3Config(endpoint_url=...)``, as a real job does. ``s3_bucket`` gives each test its own empty bucket.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

S3_REGION = "us-east-1"
_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": S3_REGION,
    "AWS_REGION": S3_REGION,
    # No instance-metadata probing (slow timeouts off EC2) and no user profile leaking in.
    "AWS_EC2_METADATA_DISABLED": "true",
}
_AWS_UNSET = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited with {proc.returncode}:\n{log.read_text(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/moto-api/", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"moto_server did not answer at {url} within {timeout:.0f}s")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Endpoint URL (``http://127.0.0.1:<port>``) of a moto S3 server that lives for the test session."""
    if importlib.util.find_spec("moto.server") is None:
        pytest.skip("moto[server] is not installed")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("moto") / "moto_server.log"
    with pytest.MonkeyPatch.context() as mp:
        for key, value in _AWS_ENV.items():
            mp.setenv(key, value)
        for key in _AWS_UNSET:
            mp.delenv(key, raising=False)
        # Config files must not override the dummy credentials; point them at nothing.
        mp.setenv("AWS_CONFIG_FILE", str(log.parent / "no-aws-config"))
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(log.parent / "no-aws-credentials"))
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            _wait_until_up(url, proc, log)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture(scope="session")
def s3_client(s3_server: str):
    """A boto3 S3 client for the moto server (to seed inputs and inspect outputs)."""
    import boto3

    return boto3.client("s3", endpoint_url=s3_server, region_name=S3_REGION)


@pytest.fixture
def s3_bucket(s3_client) -> str:
    """Name of a fresh, empty bucket on the moto server (buckets are not deleted; names never repeat)."""
    name = f"test-{uuid.uuid4().hex[:16]}"
    s3_client.create_bucket(Bucket=name)
    return name


_RAY_METRICS_PORT: list[int] = []


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """One local Ray for the whole session (about 5 s to start on 2 cores), torn down at the end. Its metrics
    agent exports on a free port (:func:`ray_metrics_url`), as a cluster's head does for Prometheus."""
    import ray

    if not ray.is_initialized():
        from serve.front_door import PROXY_CALLBACK, PROXY_CALLBACK_ENV

        os.environ.setdefault(PROXY_CALLBACK_ENV, PROXY_CALLBACK)  # as `hxd2 serve` does: Serve's proxies run it
        port = _free_port()
        ray.init(
            address="local",  # never a `ray start` cluster that happens to run on this machine
            num_cpus=2,
            include_dashboard=False,
            _metrics_export_port=port,
            runtime_env={
                "env_vars": {
                    "HF_HUB_OFFLINE": "1",
                    "TRANSFORMERS_OFFLINE": "1",
                    "TOKENIZERS_PARALLELISM": "false",
                    "VLLM_LOGGING_STREAM": "ext://sys.stderr",
                }
            },
        )
        _RAY_METRICS_PORT.append(port)
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def ray_metrics_url(ray_local) -> str:
    """``http://127.0.0.1:PORT/metrics`` of the session Ray's metrics agent (Prometheus text format)."""
    if _RAY_METRICS_PORT:
        return f"http://127.0.0.1:{_RAY_METRICS_PORT[-1]}/metrics"
    # Another test of this worker started Ray first (the order of files differs with pytest-xdist): its node says
    # where its metrics agent exports.
    import ray

    ports = [n["MetricsExportPort"] for n in ray.nodes() if n.get("Alive") and n.get("MetricsExportPort")]
    if not ports:
        pytest.fail("the session's Ray has no node with a metrics export port")
    return f"http://127.0.0.1:{ports[0]}/metrics"
