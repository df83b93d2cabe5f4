"""`hxd2 index` checks its input and output before Ray starts: one `error: ...` line, exit status 2, nothing written.

Issue 17, item 8: an output path that was a file, or a folder that could not be written, ended in a raw
traceback; a rejected input still started Ray and wrote ``_staging/build.json``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs import index as index_job

FAST = ["--set", "ray.num_cpus=1", "--set", "embedding.dim=16"]


@pytest.fixture(autouse=True)
def ray_must_not_start(monkeypatch):
    def refuse(cfg):
        raise AssertionError("Ray was started although the input or output had been rejected")

    monkeypatch.setattr(index_job, "init_ray", refuse)


@pytest.fixture
def corpus(tmp_path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "doc.txt").write_text("A document about something.", encoding="utf-8")
    return folder


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and "Traceback" not in err
    return lines[0]


def _unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process cannot create files in: a read-only folder, or /proc/self when running as root."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").write_text("x")
    except OSError:
        return folder
    (folder / "probe").unlink()
    return Path("/proc/self")  # root ignores permission bits; procfs refuses new files to everyone


def test_an_output_that_is_a_file(corpus, tmp_path, capsys):
    out = tmp_path / "out.txt"
    out.write_text("I am a file")
    assert index_job.main(["--input", str(corpus), "--output", str(out), *FAST]) == 2
    assert "is a file" in _one_error_line(capsys)
    assert out.read_text() == "I am a file"


def test_an_output_under_a_file(corpus, tmp_path, capsys):
    (tmp_path / "plain").write_text("x")
    assert index_job.main(["--input", str(corpus), "--output", str(tmp_path / "plain" / "index"), *FAST]) == 2
    assert "is a file" in _one_error_line(capsys)


def test_an_output_that_cannot_be_written(corpus, tmp_path, capsys):
    folder = _unwritable_folder(tmp_path)
    assert index_job.main(["--input", str(corpus), "--output", str(folder), *FAST]) == 2
    assert "cannot write" in _one_error_line(capsys)


def test_a_missing_input_writes_nothing(tmp_path, capsys):
    out = tmp_path / "index"
    assert index_job.main(["--input", str(tmp_path / "nope"), "--output", str(out), *FAST]) == 2
    assert "input not found" in _one_error_line(capsys)
    assert not (out / "_staging" / "build.json").exists()


def test_a_glob_matching_nothing_writes_nothing(corpus, tmp_path, capsys):
    out = tmp_path / "index"
    assert index_job.main(["--input", f"{corpus}/*.pdf", "--output", str(out), *FAST]) == 2
    assert "no input files" in _one_error_line(capsys)
    assert not (out / "_staging" / "build.json").exists()


def test_an_input_of_files_that_are_all_rejected_by_name_or_size(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.mp4").write_bytes(b"\0\0\0\x18ftypmp42")
    (corpus / "b.doc").write_bytes(b"\xd0\xcf\x11\xe0")
    out = tmp_path / "index"
    assert index_job.main(["--input", str(corpus), "--output", str(out), *FAST]) == 2
    line = _one_error_line(capsys)
    assert "unsupported_type: 2" in line
    assert not (out / "_staging" / "build.json").exists()


def test_overwrite_never_deletes_an_input_that_sits_inside_the_output(tmp_path, capsys):
    out = tmp_path / "index"
    corpus = out / "corpus"
    corpus.mkdir(parents=True)
    (corpus / "doc.txt").write_text("Precious, and inside the output folder.", encoding="utf-8")
    assert index_job.main(["--input", str(corpus), "--output", str(out), "--overwrite", *FAST]) == 2
    assert "inside the output" in _one_error_line(capsys)
    assert (corpus / "doc.txt").exists()


def test_the_unwritable_probe_really_is_unwritable(tmp_path):
    folder = _unwritable_folder(tmp_path)
    with pytest.raises(OSError):
        fd = os.open(folder / ".probe", os.O_CREAT | os.O_WRONLY)
        os.close(fd)


@pytest.mark.parametrize("where", ["under-a-file", "unwritable"])
def test_index_kb_refuses_an_output_it_cannot_create_in_one_line(tmp_path, capsys, where):
    from jobs import index_kb

    triples = tmp_path / "kb.txt"
    triples.write_text("Alice|knows|Bob\n", encoding="utf-8")
    if where == "under-a-file":
        (tmp_path / "plain").write_text("x")
        out = tmp_path / "plain" / "index"
    else:
        out = _unwritable_folder(tmp_path) / "index"
    assert index_kb.main(["--triples", str(triples), "--output", str(out), "--set", "embedding.dim=16"]) == 2
    line = _one_error_line(capsys)
    assert ("is a file" if where == "under-a-file" else "cannot") in line
