"""The index job over the hostile corpus, with its output folder inside the input, run twice (issue 17, items 6-7).

The same quarantine table as the in-process walker and readers give (tests/unit/test_hostile_corpus.py), so
Ray reads every odd name the walker lets through; the second run finds the output (with its staging parquet
files) inside the input and reads none of it: documents stay the same, ingest is skipped.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs import index as index_job
from tests.stand_ins import STAND_INS

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data"
FAST = [
    *STAND_INS,
    "--set",
    "ray.num_cpus=2",
    "--set",
    "ray.ner_batch_size=8",
    "--set",
    "ray.embed_batch_size=128",
    "--set",
    "embedding.dim=32",
    "--set",
    "ray.extraction_shards=4",
]


@pytest.fixture(scope="module")
def ray_for_jobs(request):
    """The cluster ``RAY_ADDRESS`` names (the job joins it), else the session's local Ray."""
    if not os.environ.get("RAY_ADDRESS"):
        request.getfixturevalue("ray_local")


def _spec():
    spec = importlib.util.spec_from_file_location("make_bad_inputs", DATA / "make_bad_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hostile_corpus_with_the_output_inside_the_input_twice(ray_for_jobs, tmp_path, capsys):
    spec = _spec()
    root = tmp_path / "hostile"
    shutil.copytree(DATA / "hostile", root)
    generated_rows, generated_docs = spec.add_generated_hostiles(root)
    out = root / "index-output"
    args = [
        "--input",
        str(root),
        "--output",
        str(out),
        *FAST,
        "--set",
        f"ingest.max_file_bytes={spec.HOSTILE_MAX_FILE_BYTES}",
        "--json",
    ]

    assert index_job.main(args) == 0
    first = json.loads(capsys.readouterr().out)
    quarantine = pq.read_table(out / "_staging" / "quarantine" / "part-0000.parquet").to_pylist()
    table = sorted((q["source_path"].removeprefix(f"{root}/"), q["reason"]) for q in quarantine)
    assert table == sorted(spec.expected_static_hostile_rows() + generated_rows)
    static_docs = sum(len(titles) for _, _, titles in spec.HOSTILE_FILES.values())
    assert first["documents"] == static_docs + len(generated_docs)
    assert first["failed_chunks"] == 0

    assert index_job.main(args) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["documents"] == first["documents"] and second["quarantined_files"] == first["quarantined_files"]
    assert second["stage_status"]["ingest"].startswith("skipped")
    documents = pq.read_table(out / "_staging" / "documents" / "part-0000.parquet").column("source_path").to_pylist()
    assert not [p for p in documents if p.startswith(str(out))]
