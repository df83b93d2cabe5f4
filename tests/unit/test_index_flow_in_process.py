"""The index build flow (hxd2_ray.indexer) in this process: no Ray, the same stages, staging and publish.
The equality with a build on Ray is tests/integration/test_index_flow_runners.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hxd2_ray.config import load_config
from hxd2_ray.graph.read_structures import READS_DIR, has_graph_reads
from hxd2_ray.graph.resident import ResidentGraph
from hxd2_ray.indexer.flow import IndexBuild
from hxd2_ray.retrieval import open_index
from hxd2_ray.stages.local_runner import InProcessRunner
from hxd2_ray.stages.runner import RunOptions

SAMPLE = Path(__file__).resolve().parents[2] / "hxd2_ray" / "sample_data" / "corpus"
SETTINGS = ["chunking.chunk_size_chars=400", "ray.ner_batch_size=4", "embedding.dim=16"]


def _build(corpus: Path, out: Path, **options) -> dict:
    cfg = load_config(None, SETTINGS)
    return IndexBuild(cfg, str(corpus), str(out), InProcessRunner, RunOptions(**options)).run()


def test_a_build_in_process_publishes_a_generation_and_a_rerun_changes_nothing(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(SAMPLE / "brian_kobilka.txt", corpus)
    out = tmp_path / "index"

    estimate = _build(corpus, out, dry_run=True)
    assert estimate["status"] == "estimate" and estimate["chunks"] > 0

    summary = _build(corpus, out)
    assert summary["status"] == "complete" and summary["kind"] == "build"
    assert summary["entities"] > 0 and summary["relations"] > 0
    assert summary["llm_calls"] > 0 and summary["stage_status"]["merge"].endswith("in the driver")
    # The dry run's sample (here every chunk) was extracted for real and kept: the build calls no LLM again.
    assert summary["stage_status"]["extract"].startswith("skipped") and summary["run"]["llm_calls"] == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["generation"] == summary["generation"]
    assert (out / "generations" / summary["generation"] / "graph.kuzu").exists()
    # The graph's read structures are in the generation, recorded with their checksums, and a reader maps them.
    generation = out / "generations" / summary["generation"]
    assert has_graph_reads(generation / READS_DIR)
    recorded = [f for f in manifest["files"] if f.startswith(f"{READS_DIR}/")]
    assert f"{READS_DIR}/walk_indptr.npy" in recorded and f"{READS_DIR}/entities.arrow" in recorded
    with open_index(str(out), load_config(None, SETTINGS)) as index:
        assert isinstance(index.graph, ResidentGraph) and index.graph.store._store is None  # Kùzu not opened
        assert index.graph.counts()["entities"] == summary["entities"]  # a store read opens it

    again = _build(corpus, out)
    assert again["status"] == "unchanged" and again["generation"] == summary["generation"]
