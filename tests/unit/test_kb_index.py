"""A complete index straight from a triple file (MetaQA KB slice), no NER: build, open, query both ways, refuse
to overwrite, skip malformed lines; and the ``hxd2 index-kb`` command. Hashing embedder, scripted LLM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hxd2_ray.config import HashingEmbeddingConfig, HxdConfig, ScriptedLLMConfig, VectorsConfig
from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.errors import HxdError, IndexNotFoundError
from hxd2_ray.index_store.manifest import read_manifest
from hxd2_ray.index_store.tables import VECTOR_FAMILIES
from hxd2_ray.indexer.kb_index import KB_PROMPT_VERSION, build_kb_index, file_sha256, kb_fingerprint
from hxd2_ray.logic import EntityLinker, GraphQueries, LogicFormExecutor
from hxd2_ray.logic.metaqa import read_triples, triples_to_tables
from hxd2_ray.logic.plan import Plan
from hxd2_ray.logic.plan_validation import validate_plan
from hxd2_ray.retrieval import QueryPipeline, open_index
from hxd2_ray.wiring import build_pipeline
from tests.stand_ins import STAND_INS
from tests.unit.retrieval_fixtures import keyword_reply, scripted_llm

KB = Path(__file__).resolve().parents[1] / "data" / "eval" / "metaqa" / "kb.txt"
DIM = 64
BAD_LINES = ["this line has no separators at all", "Only|two fields", "||"]


def kb_config() -> HxdConfig:
    return HxdConfig(
        llm=ScriptedLLMConfig(),
        embedding=HashingEmbeddingConfig(dim=DIM),
        vectors=VectorsConfig(num_shards=2, index_type="flat"),
    )


def embedder(cfg: HxdConfig) -> HashingEmbedder:
    return HashingEmbedder(dim=DIM, model_id=cfg.embedding.model_id)


@pytest.fixture(scope="module")
def kb_file(tmp_path_factory) -> Path:
    """The shipped slice with malformed lines mixed in (and a blank line, which is simply ignored)."""
    lines = KB.read_text(encoding="utf-8").splitlines()
    path = tmp_path_factory.mktemp("kb") / "kb.txt"
    path.write_text(
        "\n".join(lines[:3] + BAD_LINES[:1] + [""] + lines[3:10] + BAD_LINES[1:] + lines[10:]) + "\n", encoding="utf-8"
    )
    return path


@pytest.fixture(scope="module")
def built(kb_file, tmp_path_factory):
    cfg = kb_config()
    out = tmp_path_factory.mktemp("kbidx") / "index"
    log: list[str] = []
    summary = build_kb_index(cfg, kb_file, out, progress=log.append, batch_size=16, log_every=5)
    return cfg, out, summary, log


@pytest.fixture(scope="module")
def index(built):
    cfg, out, _, _ = built
    idx = open_index(out, cfg)
    yield idx
    idx.close()


def test_counts_match_the_staging_tables(built, index):
    cfg, out, summary, log = built
    entities, relations = triples_to_tables(read_triples(KB))
    assert entities.num_rows > 100 and relations.num_rows > 100  # the slice is not trivially small
    assert summary["entities"] == entities.num_rows and summary["relations"] == relations.num_rows
    assert summary["triples"] == len(read_triples(KB)) and summary["malformed_lines"] == len(BAD_LINES)
    assert all(":" in m for m in summary["malformed_examples"])
    assert summary["documents"] == summary["chunks"] == 0
    assert index.graph.counts()["entities"] == entities.num_rows
    assert index.graph.counts()["relations"] == relations.num_rows
    vectors = summary["vectors"]
    assert set(vectors) == set(VECTOR_FAMILIES)
    assert vectors["entity_name"] == vectors["entity_mix"] == entities.num_rows
    assert vectors["relation_keywords"] == vectors["relation_mix"] == relations.num_rows
    assert vectors["chunk"] == 0 and index.family("chunk").count == 0
    # manifest: the config's embedding model, the triple file's hash in the fingerprint, written last
    m = read_manifest(out)
    assert (m.embedding_model_id, m.embedding_dim) == ("hashing-v1", DIM)
    assert m.counts == {"documents": 0, "chunks": 0, "entities": entities.num_rows, "relations": relations.num_rows}
    assert m.prompt_version == KB_PROMPT_VERSION
    assert m.fingerprint == summary["fingerprint"] == kb_fingerprint(cfg, file_sha256(summary["input"]), None)
    assert set(m.vector_families) == set(VECTOR_FAMILIES)
    assert json.loads((out / "index_summary.json").read_text(encoding="utf-8"))["entities"] == entities.num_rows
    files = sorted(p.name for p in out.iterdir())
    assert files == ["graph.kuzu", "index_summary.json", "manifest.json", "reads", "vectors"]
    assert not list(out.parent.glob(".index.building-*"))  # the temp folder was renamed, nothing left over
    # progress lines: every 5 batches of 16 and one at the end
    embeds = [line for line in log if line.startswith("embedded ")]
    assert len(embeds) >= 2 and embeds[-1].startswith(f"embedded {summary['embedded_texts']:,}/")


def test_fingerprint_follows_file_content_and_model(kb_file, tmp_path):
    cfg = kb_config()
    digest = file_sha256(kb_file)
    other = tmp_path / "kb.txt"
    other.write_text(kb_file.read_text(encoding="utf-8") + "Extra Movie|directed_by|Someone\n", encoding="utf-8")
    assert kb_fingerprint(cfg, file_sha256(other), None) != kb_fingerprint(cfg, digest, None)
    wider = HxdConfig(llm=ScriptedLLMConfig(), embedding=HashingEmbeddingConfig(dim=DIM * 2), vectors=cfg.vectors)
    assert kb_fingerprint(wider, digest, None) != kb_fingerprint(cfg, digest, None)
    assert kb_fingerprint(cfg, digest, 10) != kb_fingerprint(cfg, digest, None)
    # every vector setting that shapes the written shards counts (the IVF lists, HNSW's M), not the layout only
    for change in ({"ivf_nlist": 8}, {"hnsw_m": 8}):
        other_vectors = cfg.model_copy(update={"vectors": cfg.vectors.model_copy(update=change)})
        assert kb_fingerprint(other_vectors, digest, None) != kb_fingerprint(cfg, digest, None), change


def test_dual_level_retrieval_finds_the_topic_entity(built, index):
    cfg = built[0]
    llm = scripted_llm(keyword_reply(["What Goes Up"], ["directed by"]))
    pipeline = QueryPipeline(index, llm, embedder(cfg), cfg.retrieval)
    result = pipeline.retrieve("who directed What Goes Up")
    matched = [e.key for e in result.entities if e.origin == "matched"]
    assert "what goes up" in matched
    assert any("What Goes Up --directed_by--> Jonathan Glatzer" in r.description for r in result.relations)
    assert result.chunks == ()  # a KB index has no chunks; the empty chunk family is searched harmlessly


def test_logic_executor_answers_a_one_hop_question(built, index):
    cfg = built[0]
    queries = GraphQueries(index.graph)
    linker = EntityLinker(queries, embedder=embedder(cfg), name_index=index.family("entity_name"))
    plan = validate_plan(
        [
            {
                "step": "who directed it",
                "action": {
                    "op": "retrieval",
                    "alias": "d",
                    "args": {"s": "The Public Eye", "p": "directed_by", "o": None},
                },
            },
            {"step": "answer", "action": {"op": "output", "args": {"aliases": ["$d"]}}},
        ]
    )
    assert isinstance(plan, Plan), plan
    ev = LogicFormExecutor(queries, linker).execute(plan, "who directed [The Public Eye]")
    assert not ev.failed, ev.failure
    assert ev.answers == ["Howard Franklin"]
    # the reverse direction: films Howard Franklin directed
    plan = validate_plan(
        [
            {
                "step": "",
                "action": {
                    "op": "retrieval",
                    "alias": "m",
                    "args": {"s": None, "p": "directed_by", "o": "Howard Franklin"},
                },
            }
        ]
    )
    assert LogicFormExecutor(queries, linker).execute(plan).answers == ["The Public Eye"]


def test_multistage_logic_mode_over_the_kb_index(built, index):
    cfg = built[0]
    plan = json.dumps(
        {
            "steps": [
                {
                    "step": "who wrote it",
                    "action": {
                        "op": "retrieval",
                        "alias": "w",
                        "args": {"s": "Walking, Walking", "p": "written_by", "o": None},
                    },
                },
                {"step": "answer", "action": {"op": "output", "args": {"aliases": ["$w"]}}},
            ]
        }
    )
    llm = scripted_llm(
        keyword_reply(["Walking, Walking"], ["written by"]),
        answer="unused",
        replies={"intent": "question", "logic_plan": plan, "logic_verify_pre": "yes", "logic_answer": "Ermanno Olmi"},
    )
    with build_pipeline("logic", index, llm, embedder(cfg), cfg) as pipeline:
        answer = pipeline.answer("who wrote Walking, Walking")
    assert answer.path == "logic_form", answer.trace.get("fallback_reason")
    evidence = llm.requests_by_tag("logic_answer")[0].messages[-1]["content"]
    assert "Walking, Walking --written_by--> Ermanno Olmi" in evidence


def test_second_build_refuses_without_overwrite(built, kb_file, tmp_path):
    cfg, out, summary, _ = built
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(HxdError, match="already holds an index.*--overwrite"):
        build_kb_index(cfg, kb_file, out, progress=None)
    assert (out / "manifest.json").read_bytes() == before  # untouched
    # a non-empty folder without a manifest (a partial or unrelated folder) is refused too
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(HxdError, match="not empty"):
        build_kb_index(cfg, kb_file, partial, progress=None)
    # --overwrite replaces it whole; an empty folder is fine without it
    again = build_kb_index(cfg, kb_file, partial, overwrite=True, progress=None)
    assert not (partial / "notes.txt").exists() and (partial / "manifest.json").exists()
    assert again["fingerprint"] == summary["fingerprint"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no replaced/building leftovers
    empty = tmp_path / "empty"
    empty.mkdir()
    build_kb_index(cfg, kb_file, empty, progress=None)
    assert (empty / "manifest.json").exists()


def test_malformed_only_file_and_absent_chunk_family(built, tmp_path):
    cfg, out, _, _ = built
    bad = tmp_path / "bad.txt"
    bad.write_text("\n".join(BAD_LINES) + "\n", encoding="utf-8")
    with pytest.raises(HxdError, match="no usable triple.*3 malformed"):
        build_kb_index(cfg, bad, tmp_path / "nothing", progress=None)
    assert not (tmp_path / "nothing").exists()
    # An index without the chunk family opens only when asked for the other families (the dual-level
    # pipeline needs all four it searches, which is why the builder writes chunk empty).
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shutil.rmtree(copy / "vectors" / "chunk")
    with pytest.raises(IndexNotFoundError, match="chunk"):
        open_index(copy, cfg)
    with open_index(copy, cfg, families=[f for f in VECTOR_FAMILIES if f != "chunk"]) as idx:
        assert idx.family("entity_name").count > 0


def test_limit_entities(kb_file, tmp_path):
    summary = build_kb_index(kb_config(), kb_file, tmp_path / "small", limit_entities=12, progress=None)
    assert 0 < summary["entities"] <= 12 and summary["limit_entities"] == 12


def test_cli_index_kb_json(tmp_path, capsys):
    from jobs.cli import main

    out = tmp_path / "cli-index"
    argv = [
        "index-kb",
        "--triples",
        str(KB),
        "--output",
        str(out),
        "--limit-entities",
        "20",
        *STAND_INS,
        "--json",
        "--set",
        "embedding.backend=hashing",
        "--set",
        f"embedding.dim={DIM}",
        "--set",
        "vectors.index_type=flat",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)  # stdout holds the JSON summary only; progress goes to stderr
    assert 0 < summary["entities"] <= 20 and summary["embedding_model"] == "hashing-v1"
    assert "[hxd2 index-kb] embedded" in captured.err
    assert read_manifest(out).counts["entities"] == summary["entities"]
    assert main(argv) == 2
    assert "already holds an index" in capsys.readouterr().err
    assert main(argv + ["--overwrite"]) == 0


def test_index_kb_on_a_full_disk_is_one_line_and_leaves_no_build_folder(kb_file, tmp_path):
    """Issue 40, item 8: index-kb checks its room as a build does; a full disk mid-write is one line, and its
    temporary build folder is gone (a real 3 MB tmpfs: the graph alone needs about 4 MB)."""
    import os
    import subprocess

    from hxd2_ray.index_store.disk_space import OutputFullError

    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        out = mount_point / "index"
        with pytest.raises(OutputFullError) as full:
            build_kb_index(kb_config(), kb_file, out, progress=None)
        line = str(full.value)
        assert "\n" not in line and str(mount_point) in line and "MB" in line, line
        assert sorted(p.name for p in mount_point.iterdir()) == []  # no .index.building-* folder, no index
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
