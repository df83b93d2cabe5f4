"""Query engine on real components: Kùzu read-only + Faiss + MiniLM (FlagModelEmbedder), an s3:// index through
a local S3 server, and one end-to-end ``hxd2 query`` with the real vLLM engine and the small model."""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from hxd2_ray.config import RetrievalConfig, S3Config, load_config
from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.retrieval import QueryPipeline, open_index
from tests.unit.retrieval_fixtures import (
    DIM,
    build_tiny_index,
    key,
    keyword_reply,
    scripted_llm,
    tiny_tables,
    write_index,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LOCAL_CONFIG = REPO / "configs" / "local.yaml"


@pytest.fixture(scope="module")
def minilm_index(tmp_path_factory):
    """The tiny graph with MiniLM vectors, laid out as the index job does, under the local config."""
    from hxd2_ray.embedding.flag_model import FlagModelEmbedder

    cfg = load_config(LOCAL_CONFIG)
    embedder = FlagModelEmbedder(cfg.embedding)
    root = tmp_path_factory.mktemp("minilm") / "index"
    write_index(root, cfg, *tiny_tables(), embed=embedder.embed)
    yield root, cfg, embedder
    close = getattr(embedder, "close", None)
    if callable(close):
        close()


def test_minilm_matches_by_meaning(minilm_index):
    root, cfg, embedder = minilm_index
    with open_index(root, cfg) as index:
        llm = scripted_llm(keyword_reply(["Südhof"], ["prize awarded to a scientist"]))
        pipeline = QueryPipeline(index, llm, embedder, cfg.retrieval)
        result = pipeline.retrieve("Which prize did Südhof receive?")
    entities = {e.key: e for e in result.entities}
    sudhof = entities[key("Thomas Südhof")]
    assert sudhof.origin == "matched"
    # "Südhof" is too far from "Thomas Südhof" for the fuzzy cutoff: the vectors found it.
    assert {h.channel for h in sudhof.hits} & {"entity_name", "entity_mix"}
    matched_pairs = [r.pair for r in result.relations if r.origin == "matched"]
    assert (key("Nobel Prize"), key("Thomas Südhof")) in matched_pairs
    assert any(c.doc_source_id == "thomas_sudhof.md" for c in result.chunks)
    assert result.tokens.total <= result.input_cap


def test_read_only_readers_share_the_index(minilm_index):
    root, cfg, embedder = minilm_index
    first, second = open_index(root, cfg), open_index(root, cfg)  # two read-only Kùzu databases on one file
    try:
        assert first.graph.counts() == second.graph.counts()
        llm = scripted_llm(keyword_reply(["Robert Malenka", "Stanford University"], ["employment"]))
        pipeline = QueryPipeline(first, llm, embedder, cfg.retrieval)
        questions = ["Where does Robert Malenka work?"] * 6
        with ThreadPoolExecutor(max_workers=3) as pool:  # one Kùzu connection per thread inside the store
            results = list(pool.map(pipeline.retrieve, questions))
        assert len({tuple(e.key for e in r.entities) for r in results}) == 1
        assert len({tuple(c.id for c in r.chunks) for r in results}) == 1
    finally:
        first.close()
        second.close()


def test_s3_index_is_cached_locally(tmp_path, s3_server, s3_bucket):
    tiny = build_tiny_index(tmp_path / "local")
    fs = pafs.S3FileSystem(endpoint_override=s3_server.removeprefix("http://"), scheme="http", region="us-east-1")
    pafs.copy_files(
        str(tiny.root), f"{s3_bucket}/indexes/tiny", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs
    )
    cache = tmp_path / "cache"
    cfg = tiny.cfg.model_copy(
        update={
            "s3": S3Config(endpoint_url=s3_server),
            "retrieval": RetrievalConfig(cache_dir=str(cache)),
        }
    )
    uri = f"s3://{s3_bucket}/indexes/tiny"
    with open_index(uri, cfg) as index:
        assert index.location == uri and index.root.parent == cache
        assert index.graph.counts() == tiny.counts
        llm = scripted_llm(keyword_reply(["Brian Kobilka"], []))
        dual = QueryPipeline(index, llm, HashingEmbedder(dim=DIM), cfg.retrieval)
        answer = dual.generate(None, dual.retrieve("Who is Brian Kobilka?"))
        assert answer.references[0].source_id == "brian_kobilka.txt"
        first_root = index.root
    with open_index(uri, cfg) as again:  # the cached copy is reused
        assert again.root == first_root
    assert [p.name for p in cache.iterdir() if p.name.startswith(".download-")] == []

    fs.delete_file(f"{s3_bucket}/indexes/tiny/manifest.json")
    from hxd2_ray.errors import IndexNotFoundError

    with pytest.raises(IndexNotFoundError, match="missing or half-written"):
        open_index(uri, cfg)
    with pytest.raises(IndexNotFoundError):
        open_index(f"s3://{s3_bucket}/indexes/none", cfg)
    shutil.rmtree(cache, ignore_errors=True)


@pytest.mark.vllm
def test_hxd2_query_end_to_end_with_vllm_keeps_the_engine_logs_in_a_file(minilm_index):
    """``hxd2 query`` as a user runs it (its own process, the real vLLM engine): stdout holds the answer, stderr at
    most 5 lines and no colour codes; the engine's logs are in the log file it names (one run: the engine's start
    is the cost)."""
    import re
    import subprocess
    import sys

    root, _cfg, _embedder = minilm_index
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_COLOR", "VLLM_LOGGING"))}
    env.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})

    def hxd2_query(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "jobs.cli",
                "query",
                "--index",
                str(root),
                "--config",
                str(LOCAL_CONFIG),
                "--set",
                "retrieval.answer_max_tokens=48",
                "--set",
                "retrieval.keyword_max_tokens=96",
                "--mode",
                "dual",
                *extra,
                "Which prize did Thomas Südhof win?",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    proc = hxd2_query("--json", "--trace")
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["answer"].strip()
    assert data["references"] and data["references"][0]["source_id"]
    trace = data["trace"]["retrieval"]
    assert trace["tokens"]["total"] <= trace["tokens"]["input_cap"]
    assert trace["entities"] or trace["chunks"]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) <= 5 and "\x1b[" not in proc.stderr, proc.stderr
    logged = re.search(r"engine logs go to (\S+)", proc.stderr)
    assert logged, proc.stderr
    log = Path(logged[1]).read_text(encoding="utf-8")
    assert "vllm" in log.lower() and "\x1b[" not in log  # the engine's own lines, without colour codes


def test_hxd2_query_without_config_uses_the_index_config(minilm_index, tmp_path, capsys):
    """An index built with configs/local.yaml (MiniLM) is queried without --config: the config its manifest
    records is used (no vLLM is loaded: chunk_vector needs no LLM); a config that contradicts the index still
    fails with the clear message."""
    from jobs import query

    root, cfg, _embedder = minilm_index
    rc = query.main(["--index", str(root), "--json", "--mode", "chunk_vector", "Which prize did Südhof receive?"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    data = json.loads(captured.out)
    assert data["references"][0]["source_id"] == "thomas_sudhof.md"  # MiniLM matched by meaning
    rc = query.main(
        ["--index", str(root), "--set", "embedding={backend: hashing, dim: 384}", "--mode", "chunk_vector", "q?"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "all-MiniLM-L6-v2" in err and "hashing" in err
