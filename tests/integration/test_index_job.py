"""The whole indexing job on a real local Ray cluster, Kùzu and Faiss.

The scripted LLM and hashing embedder make counts exact: the Ray pipeline must produce what the same library
functions produce in one process (the oracle), and a rerun, a resumed run and an S3 run must match it.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

from jobs import index as index_job
from tests.stand_ins import STAND_INS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "hxd2_ray" / "sample_data" / "corpus"
BAD = ROOT / "tests" / "data" / "bad_inputs"
FAST = [
    *STAND_INS,
    "--set",
    "ray.num_cpus=2",
    "--set",
    "ray.ner_batch_size=4",
    "--set",
    "ray.embed_batch_size=64",
    "--set",
    "embedding.dim=64",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    shutil.copytree(SAMPLE, folder / "good")
    shutil.copytree(BAD, folder / "bad")
    return folder


def _run(capsys, *args: str) -> tuple[int, dict | None, str]:
    code = index_job.main([*args, "--json"])
    out = capsys.readouterr()
    summary = json.loads(out.out) if code == 0 else None
    return code, summary, out.err


def _oracle(corpus: Path) -> dict:
    """What the pipeline must produce, computed in one process with the same library functions."""
    from hxd2_ray.chunking.splitter import split_document
    from hxd2_ray.config import load_config
    from hxd2_ray.extraction.extractor import Extractor
    from hxd2_ray.extraction.merge import merge_extractions
    from hxd2_ray.extraction.prompts import load_prompts
    from hxd2_ray.ingest.sources import load_documents
    from hxd2_ray.llm.scripted import ScriptedLLM

    cfg = load_config(None, ["embedding.dim=64"])
    docs, quarantined = load_documents(str(corpus), cfg.ingest, cfg.s3)
    unique = {d.id: d for d in docs}
    chunks = {c.id: c for d in unique.values() for c in split_document(d, cfg.chunking)}
    llm = ScriptedLLM.from_config(cfg.llm)
    extractions = Extractor(llm, cfg.extraction, load_prompts()).extract(list(chunks.values()))
    entities, relations = merge_extractions(extractions, cfg.extraction, llm.count_tokens)
    return {
        "documents": len(unique),
        "chunks": len(chunks),
        "entities": len(entities),
        "relations": len(relations),
        "quarantine_reasons": dict(Counter(q.reason for q in quarantined)),
        "llm_calls": sum(e.llm_calls for e in extractions),
    }


@pytest.fixture(scope="module")
def built(ray_local, corpus, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("index")
    # The distributed merge (shuffle by key partition on Ray); the other runs here merge in the driver, and the
    # tests comparing them with this build check that both ways give the same graph.
    code = index_job.main(
        ["--input", str(corpus), "--output", str(out), *FAST, "--json", "--set", "ray.merge_in_driver_below=0"]
    )
    assert code == 0
    summary = json.loads((out / "index_summary.json").read_text())
    assert summary["stage_status"]["merge"].endswith("on Ray in 1 partition")
    return out, summary


def test_counts_match_the_in_process_oracle(built, corpus):
    _, summary = built
    expected = _oracle(corpus)
    for key in ("documents", "chunks", "entities", "relations", "llm_calls"):
        assert summary[key] == expected[key], key
    assert summary["quarantine_reasons"] == expected["quarantine_reasons"]
    assert summary["entities"] > 50 and summary["relations"] > 50
    # Every bad file was quarantined with a reason, and the partly bad jsonl still gave its good line.
    assert {
        "binary",
        "undecodable",
        "empty",
        "whitespace_only",
        "unsupported_type",
        "corrupt",
        "malformed_json",
        "missing_text_field",
    } <= set(summary["quarantine_reasons"])
    assert summary["failed_chunks"] == 0


def test_graph_vectors_and_manifest_agree_with_the_summary(built):
    from hxd2_ray.graph.kuzu_store import KuzuGraphStore
    from hxd2_ray.index_store.generations import query_root
    from hxd2_ray.index_store.manifest import read_manifest
    from hxd2_ray.vectors.faiss_index import FaissFamilyIndex

    out, summary = built
    manifest = read_manifest(str(out / "manifest.json"))
    assert manifest.fingerprint == summary["fingerprint"]
    assert manifest.embedding_dim == 64 and manifest.embedding_model_id == "hashing-v1"
    assert manifest.generation == summary["generation"] == "g000001" and manifest.parent_generation == ""
    files = query_root(str(out), manifest)
    with KuzuGraphStore(f"{files}/graph.kuzu", read_only=True) as graph:
        counts = graph.counts()
        assert {k: counts[k] for k in ("documents", "chunks", "entities", "relations")} == {
            k: summary[k] for k in ("documents", "chunks", "entities", "relations")
        }
        assert counts["mentions"] > 0
        # Provenance: every entity points at chunks that exist, and the chunks know their document.
        some = graph.get_entities([graph.find_entity_by_name("Stanford University")["key"]])[0]
        chunk_rows = graph.get_chunks(some["source_chunk_ids"])
        assert chunk_rows and all(c["doc_source_id"] for c in chunk_rows)
    for family, n in summary["vectors"].items():
        index = FaissFamilyIndex.open(files, family)
        assert index.info.count == n
    assert summary["vectors"]["entity_name"] == summary["entities"]
    assert summary["vectors"]["relation_mix"] == summary["relations"]
    assert summary["vectors"]["chunk"] == summary["chunks"]


def test_rerun_on_a_finished_index_changes_nothing_and_calls_no_llm(built, corpus, capsys):
    out, first = built
    code, second, _ = _run(capsys, "--input", str(corpus), "--output", str(out), *FAST)
    assert code == 0
    assert second["status"] == "unchanged" and second["generation"] == first["generation"]
    assert second["run"]["llm_calls"] == 0
    for key in ("documents", "chunks", "entities", "relations"):
        assert second[key] == first[key], key


def test_a_crash_mid_extraction_resumes_only_the_missing_chunks(ray_local, corpus, built, tmp_path, capsys):
    _, clean = built
    out = tmp_path / "index"
    assert _run(capsys, "--input", str(corpus), "--output", str(out), *FAST)[0] == 0
    # Simulate a crash: half the extraction batches were never written, a torn file was, and no manifest.
    parts = sorted((out / "_staging" / "extractions").glob("*.parquet"))
    for p in parts[: len(parts) // 2]:
        p.unlink()
    (out / "_staging" / "extractions" / "part-torn.parquet").write_bytes(b"PAR1 truncated")
    (out / "manifest.json").unlink()
    code, resumed, _ = _run(capsys, "--input", str(corpus), "--output", str(out), *FAST)
    assert code == 0
    ran = resumed["stage_status"]["extract"]
    assert ran.startswith("ran on ") and not ran.startswith(f"ran on {clean['chunks']} of")
    for key in ("documents", "chunks", "entities", "relations"):
        assert resumed[key] == clean[key], key
    assert (out / "manifest.json").exists()


def test_llm_failures_are_recorded_then_retried_by_the_next_run(ray_local, corpus, built, tmp_path, capsys):
    _, clean = built
    out = tmp_path / "index"
    # Requests mentioning Kobilka fail on every attempt: their chunks are recorded, not dropped.
    code, failed, _ = _run(
        capsys, "--input", str(corpus), "--output", str(out), *FAST, "--set", "llm.fail_when=[Kobilka]"
    )
    assert code == 0
    assert failed["failed_chunks"] >= 1 and failed["failed_chunk_errors"]
    assert failed["entities"] < clean["entities"]
    # The index's recorded config keeps its fault injection (an update runs with the config the index was built
    # with): this run takes it away.
    code, healed, _ = _run(capsys, "--input", str(corpus), "--output", str(out), *FAST, "--set", "llm.fail_when=[]")
    assert code == 0, healed
    assert healed["failed_chunks"] == 0
    assert healed["stage_status"]["extract"] == f"ran on {failed['failed_chunks']} of {clean['chunks']} chunks"
    for key in ("entities", "relations"):
        assert healed[key] == clean[key], key


def test_a_corpus_with_no_valid_document_fails_clearly_and_leaves_no_index(ray_local, tmp_path, capsys):
    bad_only = tmp_path / "bad"
    shutil.copytree(BAD, bad_only, ignore=shutil.ignore_patterns("partly_bad.jsonl"))  # it has one good line
    out = tmp_path / "index"
    code, _, err = _run(capsys, "--input", str(bad_only), "--output", str(out), *FAST)
    assert code == 2
    assert "no valid document" in err and "quarantined" in err
    assert not (out / "manifest.json").exists()
    assert not (out / "graph.kuzu").exists()


def test_a_slow_stage_is_not_killed_by_ray_datas_stall_timeout(ray_local):
    """Ray Data fails a dataset that moved no block for 30 min; a first NER batch of a small model on a busy CPU
    takes that long. The jobs turn the timeout off (``ray.stall_timeout_s: 0``) or set it from the config."""
    import ray.data

    from hxd2_ray.config import validate_config

    index_job.init_ray(validate_config({}))
    assert ray.data.DataContext.get_current().execution_no_progress_timeout_s == -1
    index_job.init_ray(validate_config({"ray": {"stall_timeout_s": 7200}}))
    assert ray.data.DataContext.get_current().execution_no_progress_timeout_s == 7200
    index_job.init_ray(validate_config({}))


def test_index_from_and_to_s3(ray_local, s3_server, s3_client, s3_bucket, capsys):
    from hxd2_ray.config import S3Config
    from hxd2_ray.index_store.manifest import read_manifest
    from hxd2_ray.ingest.sources import resolve_filesystem

    for path in sorted(SAMPLE.iterdir()):
        s3_client.put_object(Bucket=s3_bucket, Key=f"corpus/{path.name}", Body=path.read_bytes())
    code, summary, err = _run(
        capsys,
        "--input",
        f"s3://{s3_bucket}/corpus",
        "--output",
        f"s3://{s3_bucket}/index",
        *FAST,
        "--set",
        f"s3.endpoint_url={s3_server}",
    )
    assert code == 0, err
    assert summary["documents"] == 16 and summary["entities"] > 50  # the sample corpus, its PDF and DOCX among them
    listed = {o["Key"] for o in s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="index/")["Contents"]}
    assert {"index/manifest.json", "index/generations/g000001/graph.kuzu", "index/index_summary.json"} <= listed
    assert any(k.startswith("index/generations/g000001/vectors/entity_mix/shard-") for k in listed)
    fs, path = resolve_filesystem(f"s3://{s3_bucket}/index/manifest.json", S3Config(endpoint_url=s3_server))
    assert read_manifest(path, filesystem=fs).counts["documents"] == 16


@pytest.mark.vllm
def test_end_to_end_with_the_real_vllm_engine_and_minilm(ray_local, tmp_path, capsys):
    given = os.environ.get("HXD2_DEFAULT_PATH_INDEX")
    if given and (Path(given) / "index_summary.json").exists():
        # CI has just built this index with `scripts/demo`: the same job on the same real models (the engine's
        # actor in the Ray Data stage, constrained decoding, MiniLM vectors) over the whole sample corpus.
        out = Path(given)
        summary = json.loads((out / "index_summary.json").read_text(encoding="utf-8"))
        documents = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["counts"]["documents"]
        assert documents >= len([p for p in SAMPLE.iterdir() if p.is_file()])  # a .jsonl holds several
    else:
        corpus = tmp_path / "corpus"
        corpus.mkdir()
        # One short document and no gleaning round: the real engine's minutes on a CPU go to what only it can show
        # (its actor in the Ray Data stage, constrained decoding, MiniLM vectors); the loop itself is unit-tested.
        shutil.copy(SAMPLE / "brian_kobilka.txt", corpus / "brian_kobilka.txt")
        out = tmp_path / "index"
        code, summary, err = _run(
            capsys,
            "--config",
            str(ROOT / "configs" / "local.yaml"),
            "--input",
            str(corpus),
            "--output",
            str(out),
            "--set",
            "ray.ner_batch_size=8",
            "--set",
            "extraction.max_gleaning=0",
        )
        assert code == 0, err[-3000:]
        documents = 1
    assert summary["llm_model"] == "SmolLM2-135M-Instruct" and summary["embedding_model"] == "all-MiniLM-L6-v2"
    assert summary["documents"] == documents and summary["failed_chunks"] == 0
    # Constrained decoding yields parseable records even from a 135M model.
    assert summary["entities"] > 0
    assert summary["llm_calls"] >= summary["chunks"] and summary["completion_tokens"] > 0
    assert (out / "manifest.json").exists()
    assert_no_prompt_example_names(out)


# Names of the extraction prompt's few-shot example, which the 135M model copies into the graph unless grounding
# drops them (the demo index once held these three).
PROMPT_EXAMPLE_NAMES = ("Halden Institute", "Rachel Osei", "Kelp Protection Act")


def assert_no_prompt_example_names(out: Path) -> None:
    from hxd2_ray.graph.kuzu_store import KuzuGraphStore
    from hxd2_ray.index_store.generations import query_root
    from hxd2_ray.index_store.manifest import read_manifest

    manifest = read_manifest(str(out / "manifest.json"))
    assert {"ungrounded_entities", "ungrounded_relations"} <= set(manifest.counts)
    from hxd2_ray.config import ExtractionConfig
    from hxd2_ray.extraction.merge import entity_key

    key = functools.partial(entity_key, cfg=ExtractionConfig(**manifest.config["extraction"]))
    with KuzuGraphStore(f"{query_root(str(out), manifest)}/graph.kuzu", read_only=True) as graph:
        found = [name for name in PROMPT_EXAMPLE_NAMES if graph.find_entity_by_name(name, key) is not None]
    assert not found, f"the prompt's example names reached the graph: {found}"
