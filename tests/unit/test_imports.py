"""Importing the package (and building the model-free backends) must not load the heavy stacks.

The driver, the CLI and every Ray task import hxd2_ray; pulling in torch or vLLM there would cost seconds
and gigabytes per process. Each check runs in a fresh interpreter so earlier tests cannot hide a leak.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the package is run from the checkout, not installed
HEAVY = ("ray", "vllm", "torch", "kuzu", "faiss", "FlagEmbedding")


def _loaded_heavy(code: str) -> list[str]:
    probe = code + f"\nimport sys, json\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_core_imports_are_light():
    code = "import hxd2_ray, hxd2_ray.wiring, hxd2_ray.config, hxd2_ray.llm, hxd2_ray.embedding.base"
    assert _loaded_heavy(code) == []


def test_backend_modules_import_lazily():
    # The real backends' modules import their stacks only when an instance is created.
    code = "import hxd2_ray.llm.vllm_engine, hxd2_ray.embedding.flag_model, hxd2_ray.embedding.hashing"
    assert _loaded_heavy(code) == []


def test_building_model_free_backends_stays_light():
    code = (
        "from hxd2_ray.config import ScriptedLLMConfig, HashingEmbeddingConfig\n"
        "from hxd2_ray.wiring import build_llm, build_embedder\n"
        "llm = build_llm(ScriptedLLMConfig(model_id='scripted-x'))\n"
        "emb = build_embedder(HashingEmbeddingConfig(dim=16))\n"
        "assert llm.model_id == 'scripted-x' and hasattr(llm, 'complete')\n"
        "assert emb.embed(['a']).shape == (1, 16)\n"
    )
    assert _loaded_heavy(code) == []
