"""The input walker: real paths visited once, links that cannot be resolved quarantined, index folders never read.

Issue 17, items 6 and 7: a directory symlink loop was followed to the kernel's limit (21 real files read as
861), dangling or looping file links vanished without a quarantine row, and an output folder inside the input
had its own staging files ingested on the second run.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from hxd2_ray.config import IngestConfig, S3Config
from hxd2_ray.ingest.sources import list_input_files, load_documents

CFG = IngestConfig()
S3 = S3Config()


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def looped(tmp_path) -> Path:
    """Three real files, a folder link back to the root and one to a sibling, a file alias, broken links."""
    root = tmp_path / "in"
    _write(root / "a.txt", "Alpha is a document about alpha.")
    _write(root / "sub" / "b.md", "# Beta\nBeta is a document about beta.")
    _write(root / "sub" / "deeper" / "c.txt", "Gamma is a document about gamma.")
    os.symlink("..", root / "sub" / "loop")  # sub/loop -> in: a cycle
    os.symlink("..", root / "sub" / "deeper" / "up")  # another way back into sub
    os.symlink("sub/deeper", root / "shortcut")  # a linked folder also reachable plainly
    os.symlink("a.txt", root / "alias.txt")  # the same file twice
    os.symlink("missing.txt", root / "dangling.txt")
    os.symlink("ping.txt", root / "pong.txt")
    os.symlink("pong.txt", root / "ping.txt")
    return root


def test_a_folder_link_loop_is_visited_once_and_no_document_is_duplicated(looped):
    files = list_input_files(str(looped), CFG, S3)
    assert files == [str(looped / "a.txt"), str(looped / "sub" / "b.md"), str(looped / "sub" / "deeper" / "c.txt")]
    docs, _ = load_documents(str(looped), CFG, S3)
    assert len(docs) == 3 and len({d.id for d in docs}) == 3
    assert sorted(d.source_path for d in docs) == files


def test_links_that_cannot_be_resolved_get_a_quarantine_row_with_the_reason(looped):
    _, bad = load_documents(str(looped), CFG, S3)
    rows = {Path(q.source_path).name: q for q in bad}
    assert set(rows) == {"dangling.txt", "ping.txt", "pong.txt"}
    assert {q.reason for q in bad} == {"broken_link"}
    assert "'missing.txt'" in rows["dangling.txt"].detail and "does not exist" in rows["dangling.txt"].detail
    assert "loop" in rows["ping.txt"].detail and "loop" in rows["pong.txt"].detail


def test_a_linked_folder_outside_the_root_is_read_once_when_asked(tmp_path):
    outside = _write(tmp_path / "elsewhere" / "x.txt", "X marks a document outside the input folder.")
    root = tmp_path / "in"
    _write(root / "own.txt", "The input's own document.")
    os.symlink(outside.parent, root / "ext")
    os.symlink(outside.parent, root / "ext-again")
    follow = IngestConfig(follow_external_links=True)
    files = list_input_files(str(root), follow, S3)
    assert files == [str(root / "ext" / "x.txt"), str(root / "own.txt")]


def test_links_outside_the_input_are_quarantined_not_followed_by_default(tmp_path):
    from hxd2_ray.ingest.listing import walk_inputs

    secret = _write(tmp_path / "elsewhere" / "secret.txt", "Not meant for the index.")
    root = tmp_path / "in"
    _write(root / "own.txt", "The input's own document.")
    _write(root / "sub" / "inner.txt", "Inside the input.")
    os.symlink(secret.parent, root / "ext")  # a folder outside
    os.symlink(secret, root / "secret-link.txt")  # a file outside
    os.symlink(root / "sub" / "inner.txt", root / "inner-link.txt")  # a link within the input: fine
    assert list_input_files(str(root), CFG, S3) == [str(root / "own.txt"), str(root / "sub" / "inner.txt")]
    rows = {Path(q.source_path).name: q for q in walk_inputs(str(root), S3).quarantined}
    assert {n for n, q in rows.items() if q.reason == "link_outside_input"} == {"ext", "secret-link.txt"}
    assert "follow_external_links" in rows["ext"].detail


def test_special_files_and_unusable_names_are_quarantined_not_opened(tmp_path):
    root = tmp_path / "in"
    _write(root / "ok.txt", "A fine document.")
    os.mkfifo(root / "pipe.txt")  # reading it would block forever
    _write(root / "tab\tname.txt", "Ray drops the tab from this path.")
    bad_name = os.fsencode(str(root)) + b"/latin1-\xe9.txt"
    with open(bad_name, "wb") as f:
        f.write(b"named in latin-1")
    docs, bad = load_documents(str(root), CFG, S3)
    assert [Path(d.source_path).name for d in docs] == ["ok.txt"]
    reasons = {q.source_path.rsplit("/", 1)[-1]: q.reason for q in bad}
    assert reasons == {"pipe.txt": "not_a_file", "tab\\tname.txt": "bad_file_name", "latin1-\\xe9.txt": "bad_file_name"}


def test_an_index_folder_inside_the_input_is_never_read(tmp_path):
    root = tmp_path / "in"
    _write(root / "doc.txt", "The only real document.")
    # What an index build leaves: staging parquet files whose rows hold a "text" column, and a finished index.
    _write(root / "out" / "_staging" / "build.json", json.dumps({"fingerprint": "x"}))
    _write(root / "out" / "_staging" / "chunks" / "notes.jsonl", json.dumps({"text": "a staged chunk"}))
    _write(root / "old-index" / "manifest.json", "{}")
    _write(root / "old-index" / "graph.kuzu", "not a document")
    _write(root / "old-index" / "index_summary.json", json.dumps({"text": "a summary"}))
    _write(root / "old-index" / "notes.txt", "Someone's own notes beside an index are still a document.")
    docs, bad = load_documents(str(root), CFG, S3)
    assert [Path(d.source_path).name for d in docs] == ["doc.txt", "notes.txt"]
    assert bad == []


def test_walk_inputs_excludes_the_named_output_and_reports_what_it_left_out(tmp_path):
    from hxd2_ray.ingest.listing import walk_inputs

    root = tmp_path / "in"
    _write(root / "doc.txt", "The only real document.")
    _write(root / "out" / "leftover.txt", "written by someone into the output folder")
    listing = walk_inputs(str(root), S3, exclude=(str(root / "out"),))
    assert listing.files == [str(root / "doc.txt")]
    assert listing.excluded == [str(root / "out")]


def test_deep_folders_are_walked(tmp_path):
    root = tmp_path / "in"
    deep = root.joinpath(*[f"d{i:02d}" for i in range(60)])
    _write(deep / "bottom.txt", "Sixty folders down.")
    assert list_input_files(str(root), CFG, S3) == [str(deep / "bottom.txt")]


def test_a_dangling_link_given_as_the_input_is_quarantined(tmp_path):
    os.symlink(tmp_path / "gone.txt", tmp_path / "link.txt")
    docs, bad = load_documents(str(tmp_path / "link.txt"), CFG, S3)
    assert docs == [] and Counter(q.reason for q in bad) == {"broken_link": 1}
