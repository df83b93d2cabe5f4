"""A restored index is served and answers (issue 45, item 4): an index built with the stand-ins is exported with
``hxd2 index export``, imported on another path with ``hxd2 index import``, the original removed, and the copy
served by the Serve application on the session's local Ray; one question through ``/v1/query`` is answered from
the right document, from the restored generation."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from hxd2_ray.config import load_config
from hxd2_ray.indexer.flow import IndexBuild
from hxd2_ray.stages.local_runner import InProcessRunner
from hxd2_ray.stages.runner import RunOptions
from jobs import cli
from tests.integration.servers import free_port
from tests.stand_ins import STAND_IN_OVERRIDES

pytestmark = pytest.mark.integration

SAMPLE = Path(__file__).resolve().parents[2] / "hxd2_ray" / "sample_data" / "corpus"
KEY = "sk-restore-7Qd"
DIM = 32
SETTINGS = [*STAND_IN_OVERRIDES, f"embedding.dim={DIM}", "chunking.chunk_size_chars=400"]


def test_a_restored_index_is_served_and_answers(ray_local, tmp_path):
    from ray import serve

    from serve.app import build_app

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("brian_kobilka.txt", "david_eagleman.txt", "thomas_sudhof.md"):
        shutil.copy(SAMPLE / name, corpus)
    original = tmp_path / "original"
    IndexBuild(load_config(None, SETTINGS), str(corpus), str(original), InProcessRunner, RunOptions()).run()
    archive = tmp_path / "backup.tar.gz"
    assert cli.main(["index", "export", "--index", str(original), "--output", str(archive)]) == 0
    restored = tmp_path / "other-disk" / "index"
    assert cli.main(["index", "import", str(archive), "--output", str(restored)]) == 0
    shutil.rmtree(original)  # nothing of the original is left to read

    port = free_port()
    serve.shutdown()  # a Serve left by an earlier module keeps its own port
    serve.start(http_options={"host": "127.0.0.1", "port": port, "request_timeout_s": 60})
    keys = tmp_path / "keys"
    keys.write_text(KEY + "\n")
    small = {"ray_actor_options": {"num_cpus": 0.1}}
    app = build_app(
        {
            "indexes": {"restored": str(restored)},
            "config_data": {"llm": {"backend": "scripted"}, "embedding": {"backend": "hashing", "dim": DIM}},
            "api_keys_file": str(keys),
            "mode": "dual",
            "deployment_options": {
                name: small
                for name in ("Ingress", "Retriever", "LLM", "Embedder", "Planner", "PlanExecutor", "Verifier")
            },
        }
    )
    serve.run(app, name="restored", route_prefix="/")
    try:
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/query",
            json={"question": "Which company did David Eagleman co-found?", "index": "restored", "trace": True},
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=120,
        )
    finally:
        serve.delete("restored")
        serve.shutdown()
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["generation"] == "g000001" and body["answer"]
    assert "david_eagleman.txt" in [ref["source_id"] for ref in body["references"]], body["references"]
