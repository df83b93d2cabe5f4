"""What a query process opens is memory-mapped, not read: the vector families' id maps (format 2) and the lexical
index's chunk ids and vocabulary. Opening reads no array whole (measured in a fresh process: the bytes read through
read() and the pages made resident), answers exactly as before, and an index written before (format 1) still
opens and answers the same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hxd2_ray.config import VectorsConfig
from hxd2_ray.retrieval.lexical import LexicalIndex, write_lexical
from hxd2_ray.vectors.base import FAMILY_JSON, IDMAP_PARQUET, family_dir, shard_file
from hxd2_ray.vectors.faiss_index import FaissFamilyIndex, plan_family, stored_vectors, write_family

ROOT = Path(__file__).resolve().parents[2]


def _vectors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _write_format_1(root: Path, family: str, keys: list[str], vectors: np.ndarray, cfg: VectorsConfig) -> None:
    """A family as the writer before format 2 wrote it: flat and HNSW shards in IndexIDMap2, idmap.parquet."""
    plan = plan_family(family, keys, vectors, cfg)
    folder = family_dir(root, family)
    folder.mkdir(parents=True)
    for s in range(plan.info.num_shards if plan.info.count else 0):
        x, ids = plan.shard_inputs(s)
        if plan.spec.kind == "flat":
            index = faiss.IndexIDMap2(faiss.IndexFlatIP(plan.info.dim))
        else:
            base = faiss.IndexHNSWFlat(plan.info.dim, int(plan.spec.params["M"]), faiss.METRIC_INNER_PRODUCT)
            base.hnsw.efConstruction = int(plan.spec.params["ef_construction"])
            base.hnsw.efSearch = int(plan.spec.params["ef_search"])
            index = faiss.IndexIDMap2(base)
        index.add_with_ids(x, ids)
        faiss.write_index(index, str(folder / shard_file(s)))
    by_id = np.argsort(plan.ids, kind="stable")
    pq.write_table(
        pa.table(
            {
                "vector_id": pa.array(plan.ids[by_id], pa.int64()),
                "key": pa.array(keys, pa.string()).take(pa.array(by_id)),
                "shard": pa.array(plan.shards[by_id], pa.int32()),
            }
        ),
        folder / IDMAP_PARQUET,
    )
    (folder / FAMILY_JSON).write_text(json.dumps({**plan.info.to_dict(), "format_version": 1}), encoding="utf-8")


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_a_family_of_format_1_opens_and_answers_as_one_written_now(tmp_path: Path, kind: str) -> None:
    keys = [f"entity {i}" for i in range(3000)]
    x, q = _vectors(3000, 16), _vectors(20, 16, seed=1)
    cfg = VectorsConfig(index_type=kind, num_shards=3)
    write_family(tmp_path / "now", "entity_mix", keys, x, cfg)
    now = FaissFamilyIndex.open(tmp_path / "now", "entity_mix")
    assert now.info.format_version == 2
    if kind == "ivf":  # IVF shards keep their ids in their lists: only the id map's format changed
        old_folder = family_dir(tmp_path / "old", "entity_mix")
        old_folder.parent.mkdir(parents=True)
        family_dir(tmp_path / "now", "entity_mix").rename(old_folder)
        info = json.loads((old_folder / FAMILY_JSON).read_text())
        pq.write_table(
            pa.table(
                {
                    "vector_id": np.load(old_folder / "ids.npy"),
                    "key": pa.ipc.open_file(str(old_folder / "keys.arrow")).read_all()["key"].cast(pa.string()),
                }
            ),
            old_folder / IDMAP_PARQUET,
        )
        (old_folder / "ids.npy").unlink()
        (old_folder / "keys.arrow").unlink()
        (old_folder / FAMILY_JSON).write_text(json.dumps({**info, "format_version": 1}))
        write_family(tmp_path / "now", "entity_mix", keys, x, cfg)
    else:
        _write_format_1(tmp_path / "old", "entity_mix", keys, x, cfg)
    old = FaissFamilyIndex.open(tmp_path / "old", "entity_mix")
    assert old.info.format_version == 1
    assert old.search(q, 10) == now.search(q, 10)  # the same keys, the same scores, the same order
    if kind != "ivf":
        assert dict(stored_vectors(tmp_path / "old", "entity_mix")).keys() == set(keys)
        assert {k: v.tobytes() for k, v in stored_vectors(tmp_path / "old", "entity_mix")} == {
            k: v.tobytes() for k, v in stored_vectors(tmp_path / "now", "entity_mix")
        }


QUESTIONS = ["alpha7 word12", "common", "word2999 alpha3 alpha3", "nothing here", "word0 word1 word2 alpha99"]


def test_a_lexical_index_of_format_1_opens_and_answers_as_one_written_now(tmp_path: Path) -> None:
    ids = [f"chunk{i:05d}" for i in range(3000)]
    texts = [f"word{i} common alpha{i % 100} " + ("beta " * (i % 7)) for i in range(3000)]
    write_lexical(tmp_path / "now", ids, texts)
    built = LexicalIndex.build(ids, texts)
    old = tmp_path / "old" / "lexical"
    old.mkdir(parents=True)
    built.bm25.save(str(old), show_progress=False)  # as format 1 was written: bm25s' files and chunk_ids.json
    (old / "chunk_ids.json").write_text(json.dumps(ids))
    now_index, old_index = LexicalIndex.open(tmp_path / "now" / "lexical"), LexicalIndex.open(old)
    assert now_index is not None and old_index is not None
    assert now_index.vocab is not None and old_index.vocab is None
    for question in QUESTIONS:
        expected = built.search(question, 10)
        assert now_index.search(question, 10) == expected == old_index.search(question, 10), question
    assert now_index.search("word12", 3)[0][0] == "chunk00012"
    assert now_index.best_score("nothing") == 0.0 and now_index.count == 3000


def test_an_empty_lexical_index_opens(tmp_path: Path) -> None:
    write_lexical(tmp_path, [], [])
    index = LexicalIndex.open(tmp_path / "lexical")
    assert index is not None and index.count == 0 and index.search("anything", 5) == []


# ------------------------------------------------------------------------- opening reads no array whole

_PROBE = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])

def now():
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "RssAnon:", "RssFile:")):
            name, value = line.split(":")
            out[name] = int(value.split()[0]) * 1024
    for line in Path("/proc/self/io").read_text().splitlines():
        name, value = line.split(":")
        if name == "rchar":
            out[name] = int(value)
    return out

from hxd2_ray.retrieval.lexical import LexicalIndex
from hxd2_ray.vectors.faiss_index import FaissFamilyIndex

def open_one(path):
    if sys.argv[1] == "lexical":
        return LexicalIndex.open(path)
    return FaissFamilyIndex.open(path, sys.argv[1])

warm = open_one(sys.argv[4])  # the same code paths once, so their first run's pages are not counted
before = now()
index = open_one(sys.argv[2])
after = now()
print(json.dumps({k: after[k] - before[k] for k in before}))
"""


def _open_cost(kind: str, path: Path, small: Path) -> dict[str, int]:
    """What opening ``path`` costs a fresh process (which opened ``small`` first, to load the modules and run the
    same code once): bytes read through read() (rchar), resident bytes gained."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, kind, str(path), str(ROOT), str(small)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _array_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.suffix in (".npy", ".arrow", ".faiss"))


# What opening may read or make resident: headers, JSON, a page here and there; an IVF shard's per-list bookkeeping
# (O(nlist), about 4 sqrt(n) lists).
BUDGET = 2 << 20


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mapped")
    n = 1_000_000  # ids 8 MB, keys 23 MB; flat: the shards' ids 8 MB, vectors 8 MB; IVF: lists 16 MB
    keys = [f"entity-{i:09d}" for i in range(n)]
    x = _vectors(n, 2)
    for kind in ("flat", "ivf"):
        cfg = VectorsConfig(index_type=kind, train_sample_size=20_000)
        write_family(root / "family", kind, keys, x, cfg)
        write_family(root / "family-small", kind, keys[:2000], x[:2000], cfg)
    m = 300_000  # chunk ids 5 MB, a vocabulary of 300k tokens (hashes 2.4 MB, ids 2.4 MB, tokens 5 MB)
    write_lexical(root / "lexical", [f"chunk{i:08d}" for i in range(m)], [f"word{i} common" for i in range(m)])
    write_lexical(root / "lexical-small", ["c0", "c1"], ["word0 common", "word1"])
    return root


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_opening_a_family_reads_no_array_whole(large: Path, kind: str) -> None:
    assert _array_bytes(family_dir(large / "family", kind)) > 20 * BUDGET
    cost = _open_cost(kind, large / "family", large / "family-small")
    assert cost["rchar"] < BUDGET and cost["VmRSS"] < BUDGET, cost


def test_opening_a_lexical_index_reads_no_array_whole(large: Path) -> None:
    assert _array_bytes(large / "lexical" / "lexical") > 7 * BUDGET
    cost = _open_cost("lexical", large / "lexical" / "lexical", large / "lexical-small" / "lexical")
    assert cost["rchar"] < BUDGET and cost["VmRSS"] < BUDGET, cost


# ------------------------------------------------------------------------- a served generation's documents


def test_a_served_generation_s_corpus_root_comes_from_its_read_structures(tmp_path: Path) -> None:
    from hxd2_ray.graph.read_structures import READS_DIR
    from hxd2_ray.retrieval import open_index
    from serve.live_indexes import corpus_root
    from tests.unit.retrieval_fixtures import build_tiny_index

    tiny = build_tiny_index(tmp_path / "index")
    reads = Path(tiny.root) / READS_DIR
    assert json.loads((reads / "corpus.json").read_text()) == {"corpus_root": "/corpus"}
    with open_index(tiny.root, tiny.cfg) as index:
        assert corpus_root(index.graph) == "/corpus"
        assert index.graph.store._store is None  # the Kùzu file was not opened (no Document pages scanned)
    (reads / "corpus.json").unlink()  # read structures written before the file: their mapped document column
    with open_index(tiny.root, tiny.cfg) as index:
        assert corpus_root(index.graph) == "/corpus"
        assert index.graph.store._store is None


def test_a_family_with_an_empty_shard_answers(tmp_path: Path) -> None:
    keys = ["only one"]
    write_family(tmp_path, "entity_name", keys, _vectors(1, 8), VectorsConfig(num_shards=4))
    assert FaissFamilyIndex.open(tmp_path, "entity_name").search(_vectors(2, 8), 3) == [
        [("only one", pytest.approx(s))] for s in (_cos(_vectors(1, 8)[0], q) for q in _vectors(2, 8))
    ]


def test_the_planner_s_relation_hints_come_from_the_read_structures(tmp_path: Path) -> None:
    from hxd2_ray.graph.kuzu_store import KuzuGraphStore
    from hxd2_ray.graph.read_structures import READS_DIR, RELATION_KEYWORDS_FILE
    from hxd2_ray.retrieval import open_index
    from tests.unit.retrieval_fixtures import build_tiny_index

    tiny = build_tiny_index(tmp_path / "index")
    with KuzuGraphStore(Path(tiny.root) / "graph.kuzu", read_only=True) as store:
        expected = {limit: store.top_relation_keywords(limit) for limit in (0, 1, 3, 64)}
    assert len(expected[64]) > 3  # the tiny graph has keywords enough to rank, with ties among them
    with open_index(tiny.root, tiny.cfg) as index:
        assert {limit: index.graph.top_relation_keywords(limit) for limit in expected} == expected
        assert index.graph.store._store is None  # answered without opening the Kùzu file
    (Path(tiny.root) / READS_DIR / RELATION_KEYWORDS_FILE).unlink()  # read structures from before: the store
    with open_index(tiny.root, tiny.cfg) as index:
        assert index.graph.top_relation_keywords(64) == expected[64]
        assert index.graph.store._store is not None


def _answers(root: Path, cfg) -> dict:
    from hxd2_ray.embedding.hashing import HashingEmbedder
    from hxd2_ray.retrieval import QueryPipeline, open_index
    from tests.unit.retrieval_fixtures import DIM, keyword_reply, scripted_llm

    questions = ["Who won the Nobel Prize at Stanford?", "neurexin synaptic transmission", "Malenka plasticity"]
    embedder = HashingEmbedder(dim=DIM, model_id=cfg.embedding.model_id)
    out: dict = {}
    with open_index(root, cfg) as index:
        for name, family in sorted(index.families.items()):
            out[name] = family.search(embedder.embed(questions), 5)
        assert index.lexical is not None
        out["lexical"] = [index.lexical.search(q, 5) for q in questions]
        rc = cfg.retrieval.model_copy(update={"chunk_ranking": "ppr", "ppr_lexical_seeds": 5})
        for q in questions:
            llm = scripted_llm(keyword_reply(["Nobel Prize", "Stanford University"], ["science"]))
            result = QueryPipeline(index, llm, embedder, rc).retrieve(q)
            out[q] = [(c.id, c.score) for c in result.chunks]
    return out


def test_reindex_reads_rewrites_an_older_index_s_families_and_lexical_index_to_be_mapped(tmp_path: Path, capsys):
    import shutil

    from hxd2_ray.index_store.tables import VECTOR_FAMILIES
    from jobs.index_reads import main
    from tests.unit.retrieval_fixtures import CHUNKS, build_tiny_index

    tiny = build_tiny_index(tmp_path / "index")
    root = Path(tiny.root)
    for family in VECTOR_FAMILIES:  # every family as the writer before format 2 wrote it
        stored = list(stored_vectors(root, family))
        dim = json.loads((family_dir(root, family) / FAMILY_JSON).read_text())["dim"]
        shutil.rmtree(family_dir(root, family))
        vectors = np.array([v for _, v in stored], np.float32).reshape(len(stored), dim)
        _write_format_1(root, family, [k for k, _ in stored], vectors, tiny.cfg.vectors)
    built = LexicalIndex.build([c for c, *_ in CHUNKS], [t for *_, t in CHUNKS])
    (root / "lexical").mkdir()
    built.bm25.save(str(root / "lexical"), show_progress=False)  # the lexical index as format 1 wrote it
    (root / "lexical" / "chunk_ids.json").write_text(json.dumps([c for c, *_ in CHUNKS]))
    before = _answers(root, tiny.cfg)

    assert main(["--index", str(root)]) == 0
    said = capsys.readouterr().out
    assert "vector family chunk: its id map and shards rewritten to be memory-mapped" in said
    assert "lexical index: its chunk ids and vocabulary rewritten to be memory-mapped" in said
    for family in VECTOR_FAMILIES:
        assert json.loads((family_dir(root, family) / FAMILY_JSON).read_text())["format_version"] == 2
        assert not (family_dir(root, family) / IDMAP_PARQUET).exists()
        assert (family_dir(root, family) / "keys.arrow").exists()
    manifest = json.loads((root / "manifest.json").read_text())
    assert {info["format_version"] for info in manifest["vector_families"].values()} == {2}
    assert (root / "lexical" / "lexical.json").exists() and not (root / "lexical" / "chunk_ids.json").exists()
    assert _answers(root, tiny.cfg) == before  # the same keys, scores and chunks, now from mapped files
    assert main(["--index", str(root)]) == 0  # a second run finds nothing to rewrite
