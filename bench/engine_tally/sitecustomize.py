"""Loaded by every Python process of a bench run (``bench/extraction_tokens.py`` puts this folder first on
PYTHONPATH): once ``vllm.entrypoints.llm`` is imported, each ``LLM.chat`` call appends one JSON line to the file
named by ``HXD2_ENGINE_TALLY`` with what vLLM's own ``RequestOutput`` says about its requests: prompt tokens, prompt
tokens served from the prefix cache (``num_cached_tokens``), generated tokens and finish reasons. It counts the same
way for any commit under test, without that commit's code reporting anything. No effect when the variable is unset.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
from typing import Any

_TARGET = "vllm.entrypoints.llm"
_LOCK = threading.Lock()


def _record(outputs: Any) -> None:
    row = {"requests": 0, "prompt": 0, "cached": 0, "generated": 0, "length": 0}
    for out in outputs or ():
        row["requests"] += 1
        row["prompt"] += len(out.prompt_token_ids or ())
        row["cached"] += int(getattr(out, "num_cached_tokens", 0) or 0)
        for comp in out.outputs:
            row["generated"] += len(comp.token_ids)
            row["length"] += comp.finish_reason == "length"
    with _LOCK, open(os.environ["HXD2_ENGINE_TALLY"], "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def _patch(module: Any) -> None:
    original = module.LLM.chat

    def chat(self: Any, *args: Any, **kwargs: Any) -> Any:
        outputs = original(self, *args, **kwargs)
        _record(outputs)
        return outputs

    module.LLM.chat = chat


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


if os.environ.get("HXD2_ENGINE_TALLY"):
    sys.meta_path.insert(0, _Finder())
