"""Incremental index maintenance on a real local Ray, Kùzu and Faiss, with the scripted LLM and hashing embedder.

One index is built from a first corpus, then changed in place: documents added and updated (a text file edited,
a JSON Lines record's text changed), then deleted by id and by source file. After each change the index must
equal a build from scratch of the same final corpus — the same documents, chunks, entities, relations,
descriptions and vectors — and a reader that opened the old generation must keep working. The LLM response cache
must make a rebuild call nothing, and a token budget must stop a build cleanly and let a rerun finish it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from jobs import index as index_job
from tests.stand_ins import STAND_INS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "hxd2_ray" / "sample_data" / "corpus"
# A description budget of 12 tokens makes every description of two mentions or more go through the LLM summary,
# so the summaries (and their cache) are part of every comparison.
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
    "--set",
    "extraction.description_token_budget=12",
]
FILES = (
    "brian_kobilka.txt",
    "david_eagleman.txt",
    "robert_malenka.txt",
    "stanford_emeriti.json",
    "stanford_neurobiology.jsonl",
    "TAC4.md",
)
TABLES = ("sources", "documents", "chunks", "entities", "relations")


def _run(capsys, *args: str) -> tuple[int, dict | None, str]:
    code = index_job.main([*args, "--json"])
    out = capsys.readouterr()
    summary = json.loads(out.out) if out.out.strip() else None
    return code, summary, out.err


def _state(out: Path) -> dict[str, list[dict]]:
    """The current generation's corpus tables, each sorted by its key (what a build's result is made of)."""
    manifest = json.loads((out / "manifest.json").read_text())
    folder = out / "generations" / manifest["generation"] / "tables"
    keys = {
        "sources": ("source_id", "source_path"),
        "documents": ("id",),
        "chunks": ("id",),
        "entities": ("key",),
        "relations": ("source_key", "target_key"),
    }
    state = {}
    for name in TABLES:
        rows = pq.read_table(folder / f"{name}.parquet").to_pylist()
        if name == "sources":
            for r in rows:
                r.pop("position")  # a record's place in its file: the rewritten JSON file moves records
        state[name] = sorted(rows, key=lambda r: tuple(r[k] for k in keys[name]))
    return state


def _vectors(out: Path) -> dict[str, dict[str, np.ndarray]]:
    """Every vector of every family by key, read back from the published Faiss shards."""
    from hxd2_ray.index_store.generations import query_root
    from hxd2_ray.index_store.manifest import read_manifest
    from hxd2_ray.vectors.faiss_index import stored_vectors

    files = Path(query_root(str(out), read_manifest(str(out))))
    families = {}
    for family in ("entity_name", "entity_mix", "relation_keywords", "relation_mix", "chunk"):
        families[family] = dict(stored_vectors(files, family))
    return families


def _title_mentions(out: Path) -> list[tuple[str, str]]:
    """The current generation's NAMES_TITLE edges as (chunk id, document id), sorted."""
    from hxd2_ray.graph.kuzu_store import KuzuGraphStore
    from hxd2_ray.index_store.generations import query_root
    from hxd2_ray.index_store.manifest import read_manifest

    with KuzuGraphStore(Path(query_root(str(out), read_manifest(str(out)))) / "graph.kuzu") as store:
        tables = store.scan_tables()
    chunk_of = dict(zip(tables["Chunk"]["o"].to_pylist(), tables["Chunk"]["id"].to_pylist()))
    names = tables["NAMES_TITLE"]
    return sorted((chunk_of[c], d) for c, d in zip(names["c"].to_pylist(), names["doc_id"].to_pylist()))


def _assert_same_index(a: Path, b: Path) -> None:
    sa, sb = _state(a), _state(b)
    for name in TABLES:
        assert sa[name] == sb[name], name
    assert _title_mentions(a) == _title_mentions(b)  # recomputed from the whole corpus by every build
    va, vb = _vectors(a), _vectors(b)
    for family in va:
        assert va[family].keys() == vb[family].keys(), family
        for key, vec in va[family].items():
            np.testing.assert_array_equal(vec, vb[family][key], err_msg=f"{family} {key!r}")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    for name in FILES:
        shutil.copy(SAMPLE / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def index(ray_local, corpus, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("maintained") / "index"
    code = index_job.main(["--input", str(corpus), "--output", str(out), *FAST, "--json"])
    assert code == 0
    return out, json.loads((out / "index_summary.json").read_text())


def test_add_and_update_equal_a_build_of_the_final_corpus(index, corpus, tmp_path, capsys):
    from hxd2_ray.config import load_config
    from hxd2_ray.retrieval.index import open_index
    from hxd2_ray.wiring import build_embedder

    out, first = index
    before = _state(out)
    cfg = load_config(None, ["embedding.dim=64", "extraction.description_token_budget=12"])
    reader = open_index(str(out), cfg)  # a reader of generation 1, open during the change
    eagleman = reader.graph.get_entities(["david eagleman"])[0]

    # A new file, an edited text file (a new spelling of its subject, early in the text where the scripted
    # extractor's first 12 names are, changes that entity's description), and
    # one changed record of a JSON Lines file.
    shutil.copy(SAMPLE / "karl_deisseroth.txt", corpus / "karl_deisseroth.txt")
    # A new document whose title the unchanged documents' text names: their chunks gain title mentions.
    (corpus / "stanford.md").write_text("# Stanford University\n\nA private research university in California.\n")
    (corpus / "david_eagleman.txt").write_text(
        "Neosensory was founded by DAVID EAGLEMAN in 2015.\n" + (SAMPLE / "david_eagleman.txt").read_text()
    )
    lines = (corpus / "stanford_neurobiology.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    record["text"] = record["text"].replace("Harvard", "Harvard University in Cambridge")
    lines[0] = json.dumps(record)
    (corpus / "stanford_neurobiology.jsonl").write_text("\n".join(lines) + "\n")

    code, changed, err = _run(capsys, "--input", str(corpus), "--output", str(out), *FAST)
    assert code == 0, err[-3000:]
    assert changed["kind"] == "update" and changed["generation"] == "g000002"
    assert changed["change"]["added"] == 2 and changed["change"]["updated"] == 2
    assert changed["change"]["unchanged"] == len({r["source_id"] for r in before["sources"]}) - 2
    # Only the new and changed chunks were extracted; most entities were not touched.
    added = changed["change"]["chunks_added"]
    assert changed["stage_status"]["extract"] == f"ran on {added} of {changed['chunks']} chunks"
    assert 0 < changed["run"]["stages"]["extraction"]["calls"] <= added
    assert changed["change"]["entities_affected"] < changed["entities"]

    scratch = tmp_path / "scratch"
    code, _, err = _run(capsys, "--input", str(corpus), "--output", str(scratch), *FAST)
    assert code == 0, err[-3000:]
    _assert_same_index(out, scratch)
    unchanged_chunks = {r["id"] for r in before["chunks"]} & {r["id"] for r in _state(out)["chunks"]}
    stanford = [r["id"] for r in _state(out)["documents"] if r["title"] == "Stanford University"]
    assert {c for c, d in _title_mentions(out) if d in stanford} & unchanged_chunks

    # The old reader still reads generation 1; a new one sees generation 2 and its new description's vector.
    assert reader.graph.get_entities(["david eagleman"])[0] == eagleman
    assert reader.families["entity_mix"].search(np.ones((1, 64), np.float32), 3)
    reader.close()
    with open_index(str(out), cfg) as fresh:
        now = fresh.graph.get_entities(["david eagleman"])[0]
        assert now["description"] != eagleman["description"]
        # The stored entity_mix vector is the new description's (with the hashing embedder the old text embeds
        # alike, so the stale-vector fix itself is shown by the next test).
        want = build_embedder(cfg.embedding).embed([f"{now['name']}: {now['description']}"])
        hits = fresh.families["entity_mix"].search(want, 1)[0]
        assert hits[0][0] == "david eagleman" and hits[0][1] == pytest.approx(1.0, abs=1e-5)
        # The lexical index is the new generation's: every chunk of it, and the added document's words find it.
        assert fresh.lexical is not None
        assert sorted(fresh.lexical.chunk_ids.to_pylist()) == sorted(r["id"] for r in _state(out)["chunks"])
        best = fresh.lexical.search("Stanford private research university California", 1)[0][0]
        assert best in {r["id"] for r in _state(out)["chunks"] if r["doc_id"] in stanford}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["generation"] == "g000002" and manifest["parent_generation"] == "g000001"
    assert [g["id"] for g in manifest["generations"]] == ["g000001", "g000002"]


def test_a_changed_description_is_embedded_again_and_a_gone_key_has_no_vector(ray_local, tmp_path):
    import pyarrow as pa

    from hxd2_ray.config import load_config
    from hxd2_ray.index_store import tables
    from hxd2_ray.indexer.flow import IndexBuild
    from hxd2_ray.wiring import build_embedder
    from jobs.index import ray_runner

    cfg = load_config(None, ["embedding.dim=64", "extraction.description_token_budget=12"])
    build = IndexBuild(cfg, "", str(tmp_path / "index"), ray_runner)
    build.start_runner()

    def entities(*rows: tuple[str, str]) -> pa.Table:
        return pa.Table.from_pylist(
            [
                {
                    "key": k.lower(),
                    "name": k,
                    "type": "person",
                    "description": d,
                    "source_chunk_ids": ["c"],
                    "mention_count": 1,
                    "name_truncated": False,
                }
                for k, d in rows
            ],
            schema=tables.ENTITIES,
        )

    def mix(vectors: pa.Table) -> dict[str, list[float]]:
        return {r["key"]: r["vector"] for r in vectors.to_pylist() if r["family"] == "entity_mix"}

    no_rel, no_chunk = tables.RELATIONS.empty_table(), tables.CHUNKS.empty_table()
    first = mix(
        build.embed(entities(("Ada Lovelace", "a mathematician"), ("Alan Turing", "broke Enigma")), no_rel, no_chunk)
    )
    second = mix(build.embed(entities(("Ada Lovelace", "wrote the first program")), no_rel, no_chunk))
    want = build_embedder(cfg.embedding).embed(["Ada Lovelace: wrote the first program"])[0]
    np.testing.assert_allclose(second["ada lovelace"], want, atol=1e-6)
    assert not np.allclose(second["ada lovelace"], first["ada lovelace"])
    assert set(second) == {"ada lovelace"}  # the key that is gone has no vector to publish
    assert build.clock.status["embed"].startswith("ran on 1 of 2 distinct texts")  # only the new text


def test_delete_by_id_and_by_source_equals_a_build_without_them(index, corpus, tmp_path, capsys):
    out, _ = index
    before = json.loads((out / "manifest.json").read_text())
    emeriti = json.loads((corpus / "stanford_emeriti.json").read_text())
    gone_id = emeriti[0]["id"]
    code, deleted, err = _run(
        capsys, "delete", "--output", str(out), "--doc-id", gone_id, "--source", str(corpus / "brian_kobilka.txt")
    )
    assert code == 0, err[-3000:]
    assert deleted["kind"] == "delete" and deleted["change"]["deleted"] == 2
    # A delete extracts nothing; only descriptions it changed are summarized again.
    assert "extraction" not in deleted["run"]["stages"]
    assert (
        deleted["run"]["llm_calls"] <= deleted["change"]["entities_affected"] + deleted["change"]["relations_affected"]
    )

    # The same corpus without those two documents, from scratch.
    final = tmp_path / "final"
    shutil.copytree(corpus, final)
    (final / "brian_kobilka.txt").unlink()
    (final / "stanford_emeriti.json").write_text(json.dumps(emeriti[1:], indent=1))
    scratch = tmp_path / "scratch"
    code, _, err = _run(capsys, "--input", str(final), "--output", str(scratch), *FAST)
    assert code == 0, err[-3000:]
    state = _state(out)
    assert "kobilka" not in json.dumps(state["entities"]).lower()
    # The scratch build read the emeriti file from another folder: compare everything but the paths.
    for name in ("documents", "chunks", "entities", "relations"):
        mine, theirs = state[name], _state(scratch)[name]
        if name == "documents":
            mine = [{**r, "source_path": Path(r["source_path"]).name} for r in mine]
            theirs = [{**r, "source_path": Path(r["source_path"]).name} for r in theirs]
            mine = [{**r, "source_id": r["source_id"].rsplit("/", 1)[-1]} for r in mine]
            theirs = [{**r, "source_id": r["source_id"].rsplit("/", 1)[-1]} for r in theirs]
        assert mine == theirs, name
    va, vb = _vectors(out), _vectors(scratch)
    for family in va:
        assert va[family].keys() == vb[family].keys(), family  # removed keys left Faiss
    from hxd2_ray.retrieval.lexical import LEXICAL_DIR, LexicalIndex

    lexical = LexicalIndex.open(
        out / "generations" / json.loads((out / "manifest.json").read_text())["generation"] / LEXICAL_DIR
    )
    assert lexical is not None and sorted(lexical.chunk_ids.to_pylist()) == sorted(r["id"] for r in state["chunks"])
    assert not lexical.search("Kobilka", 3)  # the deleted document's words are gone from the lexical index
    # A third generation; with generations.keep=2 the first one is gone, the second kept for its readers.
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parent_generation"] == before["generation"]
    assert sorted(p.name for p in (out / "generations").iterdir()) == [before["generation"], manifest["generation"]]

    code, _, err = _run(capsys, "delete", "--output", str(out), "--doc-id", "no-such-document")
    assert code == 2 and "no-such-document" in err and "nothing was deleted" in err
    # The same delete again (a script's retry) is a no-op that says so; a typo beside it is still an error.
    code, again, err = _run(
        capsys, "delete", "--output", str(out), "--doc-id", gone_id, "--source", str(corpus / "brian_kobilka.txt")
    )
    assert code == 0, err[-3000:]
    assert again["status"] == "unchanged" and "deleted already" in again["reason"]
    assert json.loads((out / "manifest.json").read_text())["generation"] == manifest["generation"]
    code, _, err = _run(capsys, "delete", "--output", str(out), "--doc-id", gone_id, "--doc-id", "no-such-document")
    assert code == 2 and "nothing was deleted" in err


def test_a_rebuild_with_a_warm_llm_cache_calls_no_llm(index, corpus, capsys):
    out, _ = index
    code, rebuilt, err = _run(capsys, "--input", str(corpus), "--output", str(out), *FAST, "--overwrite")
    assert code == 0, err[-3000:]
    assert rebuilt["kind"] == "build" and rebuilt["generation"] == "g000001"
    assert rebuilt["run"]["llm_calls"] == 0 and rebuilt["run"]["prompt_tokens"] == 0
    assert rebuilt["run"]["llm_cache_hits"] >= rebuilt["llm_calls"] > 0


def test_a_token_budget_stops_cleanly_and_a_rerun_finishes_the_same_index(ray_local, corpus, index, tmp_path, capsys):
    out, _ = index
    budgeted = tmp_path / "budgeted"
    code, stopped, _ = _run(
        capsys, "--input", str(corpus), "--output", str(budgeted), *FAST, "--no-llm-cache", "--budget-tokens", "4000"
    )
    assert code == index_job.EXIT_STOPPED
    assert stopped["status"] == "stopped" and "token budget" in stopped["reason"]
    assert stopped["index"] == "not written yet" and not (budgeted / "manifest.json").exists()
    assert 0 < stopped["done"]["chunks_extracted"] < stopped["done"]["chunks"], stopped
    assert stopped["left"]["stages"] == ["extract", "merge", "embed", "write"]
    spent = stopped["run"]["prompt_tokens"] + stopped["run"]["completion_tokens"]
    assert spent >= 4000 and stopped["run"]["budget"]["batches_not_started"] > 0

    code, finished, err = _run(capsys, "--input", str(corpus), "--output", str(budgeted), *FAST, "--no-llm-cache")
    assert code == 0, err[-3000:]
    left = stopped["done"]["chunks"] - stopped["done"]["chunks_extracted"]
    assert finished["stage_status"]["extract"].startswith(f"ran on {left} of")
    _assert_same_index(budgeted, out)
