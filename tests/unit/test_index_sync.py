"""``hxd2 index --sync`` (issue 45, item 2): the index becomes exactly the input folder, in one generation, and
equals a clean build of that folder by content; without --sync an update names what it leaves behind. In this
process (the in-process runner: the same stages, staging and publish as on Ray)."""

from __future__ import annotations

import shutil
from pathlib import Path

from hxd2_ray.config import load_config
from hxd2_ray.indexer.flow import IndexBuild
from hxd2_ray.stages.local_runner import InProcessRunner
from hxd2_ray.stages.runner import RunOptions
from jobs.index_format import format_summary
from tests.integration.index_content import graph_rows, vector_contents
from tests.stand_ins import STAND_IN_OVERRIDES

SAMPLE = Path(__file__).resolve().parents[2] / "hxd2_ray" / "sample_data" / "corpus"
SETTINGS = [*STAND_IN_OVERRIDES, "chunking.chunk_size_chars=400", "ray.ner_batch_size=4", "embedding.dim=16"]
DOCS = ("brian_kobilka.txt", "david_eagleman.txt", "TAC4.md")


def _run(corpus: Path, out: Path, **options) -> dict:
    cfg = load_config(None, SETTINGS)
    return IndexBuild(cfg, str(corpus), str(out), InProcessRunner, RunOptions(**options)).run()


def test_sync_removes_what_the_folder_lost_and_equals_a_clean_build(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in DOCS:
        shutil.copy(SAMPLE / name, corpus)
    index = tmp_path / "index"
    assert _run(corpus, index)["documents"] == 3

    (corpus / "TAC4.md").unlink()
    shutil.copy(SAMPLE / "thomas_sudhof.md", corpus)
    update = _run(corpus, index)  # without --sync: the gone file stays, and the summary says so
    assert update["documents"] == 4 and update["missing_from_input"] == [str(corpus / "TAC4.md")]
    text = format_summary(update)
    assert "1 indexed files are not in this input and stay in the index" in text and "--sync" in text

    synced = _run(corpus, index, sync=True)
    assert synced["kind"] == "sync" and synced["documents"] == 3
    assert synced["change"]["deleted"] == 1 and synced["change"]["added"] == 0
    assert _run(corpus, index, sync=True)["status"] == "unchanged"  # the same input again: nothing to do

    clean = tmp_path / "clean"
    _run(corpus, clean)
    synced_rows, clean_rows = graph_rows(index), graph_rows(clean)
    assert synced_rows == clean_rows
    assert not any("TAC4" in row for row in synced_rows["Document"])
    assert vector_contents(index) == vector_contents(clean)


def test_sync_adds_changes_and_deletes_in_one_generation(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in DOCS[:2]:
        shutil.copy(SAMPLE / name, corpus)
    index = tmp_path / "index"
    first = _run(corpus, index)
    (corpus / "david_eagleman.txt").unlink()
    shutil.copy(SAMPLE / "TAC4.md", corpus)
    (corpus / "brian_kobilka.txt").write_text((SAMPLE / "brian_kobilka.txt").read_text() + "\nHe likes rice.\n")
    synced = _run(corpus, index, sync=True)
    assert (synced["change"]["added"], synced["change"]["updated"], synced["change"]["deleted"]) == (1, 1, 1)
    assert synced["generation"] != first["generation"] and synced["documents"] == 2


def test_an_update_that_would_extract_differently_says_what_changed_and_asks_for_rebuild(tmp_path):
    """Issue 45, item 4: a new release's prompts, models or settings under an existing index are never rebuilt
    silently: the update stops before any work, lists what changed, and --rebuild builds a new generation."""
    import pytest

    from hxd2_ray.indexer.release_change import RebuildNeededError

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(SAMPLE / DOCS[0], corpus)
    index = tmp_path / "index"
    first = _run(corpus, index)
    changed = [*SETTINGS, "extraction.max_gleaning=0"]

    def run_changed(**options) -> dict:
        cfg = load_config(None, changed)
        return IndexBuild(cfg, str(corpus), str(index), InProcessRunner, RunOptions(**options)).run()

    with pytest.raises(RebuildNeededError, match=r"extraction\.max_gleaning: 1 -> 0.*--rebuild"):
        run_changed()
    assert (index / "manifest.json").exists()  # the published index is as it was
    rebuilt = run_changed(rebuild=True)
    assert rebuilt["kind"] == "rebuild" and rebuilt["generation"] != first["generation"]
    assert run_changed()["status"] == "unchanged"  # built the new way now: an update needs nothing more
