"""What the default-path test files share: the sample questions, ``hxd2`` as a user runs it, and the index they
query (the one ``scripts/demo`` just built when ``HXD2_DEFAULT_PATH_INDEX`` names it, else three sample documents
indexed with no ``--config``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hxd2_ray.index_store.manifest import read_manifest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "hxd2_ray" / "sample_data" / "corpus"
DOCS = ("brian_kobilka.txt", "david_eagleman.txt", "TAC4.md")
QUESTIONS = (
    {"id": "q1", "question": "Which prize did Brian Kobilka win?", "answers": ["Nobel Prize in Chemistry"]},
    {"id": "q2", "question": "Which company did David Eagleman co-found?", "answers": ["Neosensory"]},
    {"id": "q3", "question": "TAC4基因位于水稻的几号染色体上？", "answers": ["2"]},
)


def hxd2(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def default_path_index(tmp_path_factory) -> Path:
    """The demo's index when ``HXD2_DEFAULT_PATH_INDEX`` names one, else one built here by ``hxd2 index``; either
    way built on the real default models."""
    given = os.environ.get("HXD2_DEFAULT_PATH_INDEX")
    if given and (Path(given) / "manifest.json").exists():
        out = Path(given).resolve()
    else:
        corpus = tmp_path_factory.mktemp("corpus")
        for name in DOCS:
            (corpus / name).write_bytes((SAMPLE / name).read_bytes())
        out = tmp_path_factory.mktemp("default") / "index"
        proc = hxd2("index", "--input", str(corpus), "--output", str(out))
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert "not a model" not in proc.stderr + proc.stdout  # no stand-in named: none used
    manifest = read_manifest(out / "manifest.json")
    assert (manifest.config["llm"]["backend"], manifest.config["embedding"]["backend"]) == ("vllm", "flag")
    return out
