"""The hostile-input corpus (tests/data/hostile plus what is made at test time): the expected quarantine table.

UTF-16 with and without a byte order mark, NUL bytes, CRLF, a half-broken JSONL file, absurd JSON nesting and
integers, a folder link loop, a dangling link, a loop of file links, a named pipe, 60 nested folders, odd and
unusable file names and a file over ``ingest.max_file_bytes``: every entry gives documents or a quarantine row
with its reason, none is read twice, and nothing raises.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from hxd2_ray.config import IngestConfig, S3Config
from hxd2_ray.ingest.sources import load_documents

DATA = Path(__file__).resolve().parents[1] / "data"


def _spec():
    spec = importlib.util.spec_from_file_location("make_bad_inputs", DATA / "make_bad_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def spec():
    return _spec()


@pytest.fixture
def hostile(spec, tmp_path) -> tuple[Path, list[tuple[str, str]], list[str]]:
    root = tmp_path / "hostile"
    shutil.copytree(DATA / "hostile", root)
    rows, docs = spec.add_generated_hostiles(root)
    return root, rows, docs


def test_the_committed_files_are_up_to_date(spec):
    assert sorted(p.name for p in (DATA / "hostile").iterdir()) == sorted(spec.HOSTILE_FILES)
    for name, (data, _, _) in spec.HOSTILE_FILES.items():
        assert (DATA / "hostile" / name).read_bytes() == data, f"{name} is stale: rerun tests/data/make_bad_inputs.py"


def test_the_quarantine_table_and_the_documents(spec, hostile):
    root, generated_rows, generated_docs = hostile
    docs, bad = load_documents(str(root), IngestConfig(max_file_bytes=spec.HOSTILE_MAX_FILE_BYTES), S3Config())
    table = sorted((q.source_path.removeprefix(f"{root}/"), q.reason) for q in bad)
    assert table == sorted(spec.expected_static_hostile_rows() + generated_rows)
    # Each static row's detail says what was wrong, in order within its file.
    for name, (_, reasons, _) in spec.HOSTILE_FILES.items():
        details = [q.detail for q in bad if q.source_path == f"{root}/{name}"]
        assert len(details) == len(reasons), name
        for detail, (_, fragment) in zip(details, reasons, strict=True):
            assert fragment in detail, (name, detail)
    # Documents: each static file's titles, one per generated document file, none twice.
    titles = sorted(
        d.title
        for d in docs
        if "/" not in d.source_path.removeprefix(f"{root}/") and Path(d.source_path).name in spec.HOSTILE_FILES
    )
    assert titles == sorted(t for _, _, ts in spec.HOSTILE_FILES.values() for t in ts)
    paths = sorted({d.source_path.removeprefix(f"{root}/") for d in docs} - set(spec.HOSTILE_FILES))
    assert paths == sorted(generated_docs)
    assert len({d.id for d in docs}) == len(docs)
