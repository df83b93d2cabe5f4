"""The library's build flow (hxd2_ray.indexer) over its two runners: in this process, without Ray, and on
Ray Data (what ``hxd2 index`` runs). The scripted LLM and hashing embedder make both exact: the same corpus gives
the same graph and the same vectors, and an update and a delete in process equal them too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hxd2_ray.config import load_config
from hxd2_ray.indexer.flow import IndexBuild
from hxd2_ray.stages.local_runner import InProcessRunner
from tests.integration.index_content import graph_rows, vector_contents

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "hxd2_ray" / "sample_data" / "corpus"
DOCS = ("brian_kobilka.txt", "thomas_sudhof.md", "TAC4.md")
SETTINGS = [
    "chunking.chunk_size_chars=300",
    "ray.ner_batch_size=2",
    "ray.embed_batch_size=32",
    "ray.extraction_shards=4",
    "embedding.dim=32",
    "ray.num_cpus=2",
]


def _content(index: Path) -> tuple[dict, dict, dict]:
    counts = json.loads((index / "manifest.json").read_text())["counts"]
    return graph_rows(index), vector_contents(index), counts


def _in_process(corpus: Path, out: Path, *, delete: list[str] | None = None) -> dict:
    cfg = load_config(None, SETTINGS)
    build = IndexBuild(cfg, str(corpus), str(out), InProcessRunner)
    return build.delete([], delete) if delete is not None else build.run()


def _corpus(folder: Path, docs: tuple[str, ...]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in docs:
        shutil.copy(SAMPLE / name, folder / name)
    return folder


def test_the_in_process_runner_builds_what_the_ray_runner_builds(ray_local, tmp_path):
    from jobs.index import run_index

    corpus = _corpus(tmp_path / "corpus", DOCS)
    local = _in_process(corpus, tmp_path / "local")
    assert local["status"] == "complete" and local["kind"] == "build"
    assert local["cluster"]["files_checked"] > 0  # the files the stages wrote were checked as on Ray
    on_ray = run_index(load_config(None, SETTINGS), str(corpus), str(tmp_path / "ray"))
    assert on_ray["status"] == "complete"
    assert _content(tmp_path / "local") == _content(tmp_path / "ray")

    # An update (a new document) and a delete in process equal builds of the final corpora.
    extra = sorted(p.name for p in SAMPLE.iterdir() if p.is_file() and p.name not in DOCS)[:1]
    _corpus(corpus, tuple(extra))
    updated = _in_process(corpus, tmp_path / "local")
    assert updated["kind"] == "update" and updated["change"]["added"] == len(extra)
    assert _in_process(corpus, tmp_path / "fresh")["kind"] == "build"
    assert _content(tmp_path / "local") == _content(tmp_path / "fresh")

    deleted = _in_process(corpus, tmp_path / "local", delete=[str((corpus / extra[0]).resolve())])
    assert deleted["kind"] == "delete" and deleted["change"]["deleted"] == 1
    assert _content(tmp_path / "local") == _content(tmp_path / "ray")
