"""``hxd2 index export`` and ``hxd2 index import`` (issue 45, item 4): a backup holds the manifest and the published
generation only, a restore on another path passes ``hxd2 index verify`` and answers as the original, an update
published during an export never tears it, and a hostile archive writes nothing outside the output folder. The
index is built in this process (the in-process runner with the stand-ins)."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from hxd2_ray.config import load_config
from hxd2_ray.errors import IndexDamagedError
from hxd2_ray.index_store.backup import ArchiveRefusedError, export_index, import_index
from hxd2_ray.index_store.leases import LeaseKeeper
from hxd2_ray.indexer.flow import IndexBuild
from hxd2_ray.stages.local_runner import InProcessRunner
from hxd2_ray.stages.runner import RunOptions
from jobs import cli, query
from tests.integration.index_content import graph_rows, vector_contents
from tests.stand_ins import STAND_IN_OVERRIDES

SAMPLE = Path(__file__).resolve().parents[2] / "hxd2_ray" / "sample_data" / "corpus"
SETTINGS = [
    *STAND_IN_OVERRIDES,
    "chunking.chunk_size_chars=400",
    "ray.ner_batch_size=4",
    "embedding.dim=16",
    "generations.keep=1",
]
DOCS = ("brian_kobilka.txt", "david_eagleman.txt", "TAC4.md")
QUESTION = "Which company did David Eagleman co-found?"


def _run(corpus: Path, out: Path) -> dict:
    return IndexBuild(load_config(None, SETTINGS), str(corpus), str(out), InProcessRunner, RunOptions()).run()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("backup")
    corpus = base / "corpus"
    corpus.mkdir()
    for name in DOCS:
        shutil.copy(SAMPLE / name, corpus)
    _run(corpus, base / "index")
    return corpus, base / "index"


def _fresh_copy(built: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    corpus = tmp_path / "corpus"
    shutil.copytree(built[0], corpus)
    index = tmp_path / "index"
    shutil.copytree(built[1], index)
    return corpus, index


def _answer(index: Path, capsys) -> dict:
    assert query.main(["--index", str(index), QUESTION, "--mode", "dual", "--json", "--trace"]) == 0
    data = json.loads(capsys.readouterr().out)
    retrieval = data["trace"]["retrieval"]
    return {
        "references": data["references"],
        "entities": [e["name"] for e in retrieval["entities"]],
        "relations": retrieval.get("relations"),
        "answer": data["answer"],
    }


def test_a_restore_on_another_path_verifies_and_answers_as_the_original(built, tmp_path, capsys):
    _, index = _fresh_copy(built, tmp_path)
    archive = tmp_path / "backup.tar.gz"
    assert cli.main(["index", "export", "--index", str(index), "--output", str(archive)]) == 0
    assert "exported generation g000001" in capsys.readouterr().out
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    # the manifest and the published generation only: no staging, LLM cache, logs, leases or summary
    assert names[0] == "manifest.json" and names[-1] == "hxd2-export.json"
    assert all(n.startswith("generations/g000001/") for n in names[1:-1]), names
    assert {n.split("/")[2] for n in names[1:-1]} == {"graph.kuzu", "reads", "vectors", "lexical", "tables"}

    restored = tmp_path / "elsewhere" / "restored"
    assert cli.main(["index", "import", str(archive), "--output", str(restored)]) == 0
    assert "ok: imported generation g000001" in capsys.readouterr().out
    assert sorted(p.name for p in restored.iterdir()) == ["generations", "manifest.json"]
    assert cli.main(["index", "verify", "--index", str(restored)]) == 0
    assert "files match the manifest (size+sha256)" in capsys.readouterr().out

    assert graph_rows(restored) == graph_rows(index)
    assert vector_contents(restored) == vector_contents(index)
    original = _answer(index, capsys)
    assert original["references"] and any("david_eagleman" in r["source_id"] for r in original["references"])
    assert _answer(restored, capsys) == original

    # the restored index takes updates: its corpus tables came along, so the folder it was built from is unchanged
    assert _run(built[0], restored)["status"] == "unchanged"


def test_import_refuses_a_non_empty_output_and_a_damaged_archive(built, tmp_path, capsys):
    archive = tmp_path / "backup.tar.gz"
    export_index(pafs.LocalFileSystem(), str(built[1]), archive, location=str(built[1]))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    assert cli.main(["index", "import", str(archive), "--output", str(busy)]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert [p.name for p in busy.iterdir()] == ["notes.txt"]
    assert cli.main(["index", "export", "--index", str(built[1]), "--output", str(archive)]) == 2  # never overwritten
    assert "exists" in capsys.readouterr().err

    # one byte of the graph changed, the listing left as it was: named, and nothing is restored
    members = _members(archive)
    graph = "generations/g000001/graph.kuzu"
    body = bytearray(members[graph])
    body[len(body) // 2] ^= 0xFF
    members[graph] = bytes(body)
    damaged = _write_tar(tmp_path / "damaged.tar.gz", [(n, b) for n, b in members.items()])
    with pytest.raises(IndexDamagedError, match="graph.kuzu .* the archive is damaged"):
        import_index(damaged, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.importing-*"))


def test_an_update_published_during_an_export_does_not_tear_it(built, tmp_path):
    corpus, index = _fresh_copy(built, tmp_path)
    before = graph_rows(index)
    fs = pafs.LocalFileSystem()

    def update(manifest) -> None:  # the lease on g000001 is held: keep=1 still leaves it on disk
        shutil.copy(SAMPLE / "thomas_sudhof.md", corpus)
        assert _run(corpus, index)["generation"] == "g000002"
        assert (index / "generations" / "g000001").is_dir()

    archive = tmp_path / "during.tar.gz"
    result = export_index(fs, str(index), archive, location=str(index), before_archiving=update)
    assert result["generation"] == "g000001"
    restored = import_index(archive, tmp_path / "restored")
    assert restored["generation"] == "g000001"
    assert graph_rows(tmp_path / "restored") == before


def test_a_generation_pruned_before_the_lease_is_exported_again_from_the_new_manifest(built, tmp_path):
    """The race a lease cannot close: an update publishes and prunes between the export's manifest read and its
    lease. The export notices the generation gone and starts again from the new manifest."""
    corpus, index = _fresh_copy(built, tmp_path)

    class UpdateFirst(LeaseKeeper):
        updated = False

        def hold(self, fs, root, generation):
            if not self.updated:
                self.updated = True
                shutil.copy(SAMPLE / "thomas_sudhof.md", corpus)
                _run(corpus, index)  # g000002 published, g000001 pruned (keep=1, no lease on it yet)
                assert not (index / "generations" / "g000001").exists()
            return super().hold(fs, root, generation)

    keeper = UpdateFirst()
    try:
        result = export_index(pafs.LocalFileSystem(), str(index), tmp_path / "a.tar.gz", location="x", keeper=keeper)
    finally:
        keeper.close()
    assert result["generation"] == "g000002"
    import_index(tmp_path / "a.tar.gz", tmp_path / "restored")
    assert graph_rows(tmp_path / "restored") == graph_rows(index)


# --------------------------------------------------------------------------------------------- hostile archives


def _members(archive: Path) -> dict[str, bytes]:
    out = {}
    with tarfile.open(archive) as tar:
        for m in tar:
            if m.isfile():
                out[m.name] = tar.extractfile(m).read()
    return out


def _write_tar(path: Path, entries: list) -> Path:
    """``entries``: (name, bytes) files or ready TarInfo objects (links, devices)."""
    with tarfile.open(path, "w:gz") as tar:
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                tar.addfile(entry)
            else:
                name, body = entry
                info = tarfile.TarInfo(name)
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
    return path


def _special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.devmajor, info.devminor = 1, 3
    return info


HOSTILE = {
    "absolute path": ([("/tmp/hxd2-hostile-absolute", b"x")], "absolute path"),
    "dot-dot": ([("manifest.json", b"{}"), ("../escaped.txt", b"x")], r"climbs out .*'\.\.'"),
    "dot-dot inside": ([("generations/g1/../../../escaped.txt", b"x")], r"'\.\.'"),
    "symlink": ([_special("generations", tarfile.SYMTYPE, "/tmp")], "is a link"),
    "hard link": ([_special("manifest.json", tarfile.LNKTYPE, "/etc/passwd")], "is a link"),
    "character device": ([_special("manifest.json", tarfile.CHRTYPE)], "device or special file"),
    "fifo": ([_special("manifest.json", tarfile.FIFOTYPE)], "device or special file"),
    "not an index file": ([("manifest.json", b"{}"), ("_leases/x.lease", b"x")], "no part of an exported index"),
    "a file twice": ([("manifest.json", b"{}"), ("manifest.json", b"{}")], "one file twice"),
    "no listing": ([("manifest.json", b"{}")], "no hxd2-export.json"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_archive_is_refused_and_writes_nothing_outside(case, tmp_path, capsys):
    entries, message = HOSTILE[case]
    archive = _write_tar(tmp_path / "hostile.tar.gz", entries)
    out = tmp_path / "deep" / "out"
    with pytest.raises(ArchiveRefusedError, match=message):
        import_index(archive, out)
    assert not out.exists() and list((tmp_path / "deep").iterdir()) == []
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "deep" / "escaped.txt").exists()
    assert not Path("/tmp/hxd2-hostile-absolute").exists()
    assert cli.main(["index", "import", str(archive), "--output", str(out)]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_a_valid_listing_does_not_smuggle_files_of_another_generation(built, tmp_path):
    archive = tmp_path / "backup.tar.gz"
    export_index(pafs.LocalFileSystem(), str(built[1]), archive, location="x")
    members = _members(archive)
    listing = json.loads(members.pop("hxd2-export.json"))
    members["generations/g000009/extra.bin"] = b"x"
    listing["files"]["generations/g000009/extra.bin"] = {
        "size": 1,
        "sha256": __import__("hashlib").sha256(b"x").hexdigest(),
    }
    members["hxd2-export.json"] = json.dumps(listing).encode()
    with pytest.raises(ArchiveRefusedError, match="no published generation"):
        import_index(_write_tar(tmp_path / "smuggle.tar.gz", list(members.items())), tmp_path / "out")
