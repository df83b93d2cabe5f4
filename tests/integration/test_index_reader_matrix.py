"""Every way an index is written, opened by every reader (issue 29: one writer and one opener).

Writers: a full ``hxd2 index`` build, an incremental update of it (a file added), a delete (by source), and
``hxd2 index-kb`` (a knowledge base of triples). Readers: the opener the query, evaluation and Serve use
(``open_index``, then dual-level retrieval over it), Serve's generation-following ``LiveIndex``, the graph views
(``hxd2 graph stats``), ``hxd2 index verify``, the refusal calibration (``hxd2 calibrate``) and GraphFlow's
features. A reader that cannot open what a writer wrote fails its cell; a second layout or opener that drifts
from the others (the cause of the broken graph views of issue 28) shows up here first.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from hxd2_ray.config import load_config
from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.index_store.manifest import read_manifest
from hxd2_ray.retrieval import QueryPipeline, open_index
from hxd2_ray.retrieval.live_index import LiveIndex
from jobs import index as index_job
from tests.stand_ins import STAND_IN_OVERRIDES
from tests.unit.retrieval_fixtures import keyword_reply, scripted_llm

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "hxd2_ray" / "sample_data" / "corpus"
KB = ROOT / "tests" / "data" / "eval" / "metaqa" / "kb.txt"
OVERRIDES = [
    *STAND_IN_OVERRIDES,
    "ray.num_cpus=2",
    "ray.ner_batch_size=4",
    "embedding.dim=64",
    "vectors.index_type=flat",
]
SETS = [arg for item in OVERRIDES for arg in ("--set", item)]
WRITERS = ("full", "update", "delete", "kb")


def _config() -> Any:
    return load_config(None, OVERRIDES)


@pytest.fixture(scope="module")
def indexes(tmp_path_factory) -> dict[str, Path]:
    """One index per writer path, each in its own folder."""
    work = tmp_path_factory.mktemp("matrix")
    corpus = work / "corpus"
    corpus.mkdir()
    for name in ("brian_kobilka.txt", "david_eagleman.txt"):
        shutil.copy(SAMPLE / name, corpus / name)
    out: dict[str, Path] = {"full": work / "full"}
    assert index_job.main(["--input", str(corpus), "--output", str(out["full"]), *SETS, "--json"]) == 0

    out["update"] = work / "update"
    shutil.copytree(out["full"], out["update"])
    shutil.copy(SAMPLE / "robert_malenka.txt", corpus / "robert_malenka.txt")
    assert index_job.main(["--input", str(corpus), "--output", str(out["update"]), *SETS, "--json"]) == 0

    out["delete"] = work / "delete"
    shutil.copytree(out["update"], out["delete"])
    gone = str(corpus / "david_eagleman.txt")
    assert index_job.main(["delete", "--output", str(out["delete"]), "--source", gone, *SETS, "--json"]) == 0

    from jobs.cli import main as cli_main

    out["kb"] = work / "kb"
    assert cli_main(["index-kb", "--triples", str(KB), "--output", str(out["kb"]), *SETS, "--json"]) == 0
    generations = {name: read_manifest(path).generation for name, path in out.items()}
    assert generations["update"] != generations["full"] and generations["delete"] != generations["update"]
    return out


def read_with_open_index(path: Path, tmp: Path) -> None:
    cfg = _config()
    with open_index(path, cfg) as index:
        assert index.graph.counts()["entities"] > 0
        embedder = HashingEmbedder(dim=cfg.embedding.dim, model_id=cfg.embedding.model_id)
        for name in index.manifest.vector_families:
            index.family(name).search(embedder.embed(["a question"]), 3)
        llm = scripted_llm(keyword_reply(["Brian Kobilka", "What Goes Up"], ["research"]))
        result = QueryPipeline(index, llm, embedder, cfg.retrieval).retrieve("Who is Brian Kobilka?")
        assert result.entities or result.chunks, result


def read_live(path: Path, tmp: Path) -> None:
    live = LiveIndex(str(path), _config(), lambda index: index.graph.counts(), poll_s=0)
    try:
        with live.pin() as pinned:
            assert pinned.generation == read_manifest(path).generation and pinned.value["entities"] > 0
    finally:
        live.close()


def read_graph_views(path: Path, tmp: Path) -> None:
    from jobs.graph_cli import main

    assert main(["stats", "--index", str(path), "--output", str(tmp / "stats"), "--json"]) == 0
    assert (tmp / "stats" / "stats.png").stat().st_size > 0


def read_verify(path: Path, tmp: Path) -> None:
    from jobs.index_verify import verify_index

    result = verify_index(str(path), _config())
    assert result["ok"] and result["files"] > 0, result


def read_calibration(path: Path, tmp: Path) -> None:
    from jobs.calibrate import main

    good, bad = tmp / "good.jsonl", tmp / "bad.jsonl"
    good.write_text(
        "".join(json.dumps({"question": q}) + "\n" for q in ("Who is Brian Kobilka?", "Who directed What Goes Up?"))
    )
    bad.write_text("".join(json.dumps({"question": q}) + "\n" for q in ("Best pizza in Rome?", "How do I fix a bike?")))
    assert main(["--index", str(path), "--good", str(good), "--bad", str(bad), "--out", str(tmp), *SETS]) == 0
    assert (tmp / "calibration.json").is_file()


def read_graphflow_features(path: Path, tmp: Path) -> None:
    from hxd2_ray.graphflow.features import load_or_build_features

    cfg = _config()
    embedder = HashingEmbedder(dim=cfg.embedding.dim, model_id=cfg.embedding.model_id)
    with open_index(path, cfg) as index:
        features = load_or_build_features(index, embedder, cache_dir=str(tmp / "features"), progress=None)
    assert features.node_vectors.shape[0] > 0


READERS: dict[str, Callable[[Path, Path], None]] = {
    "open_index+retrieve": read_with_open_index,
    "live_index": read_live,
    "graph_views": read_graph_views,
    "verify": read_verify,
    "calibrate": read_calibration,
    "graphflow_features": read_graphflow_features,
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("writer", WRITERS)
def test_every_reader_opens_what_every_writer_wrote(indexes, writer, reader, tmp_path):
    READERS[reader](indexes[writer], tmp_path)
