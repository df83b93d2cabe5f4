"""What a new release (or a new config) changed under an existing index, said before an update starts.

An update re-extracts only changed documents, so it needs the extractions of the index it updates to be what this
release and config would make. When the extraction prompts, the models or a setting the staged work depends on
changed (the staging fingerprint), every chunk must be extracted again: a full rebuild. That is never done
silently: the update stops before any work with the list of what changed and asks for ``--rebuild``, which builds
the whole input again into a new generation (the published one stays served until the new one is published; the
LLM cache is kept, so unchanged prompts cost nothing).
"""

from __future__ import annotations

from typing import Any

from hxd2_ray.config import HxdConfig, config_from_data, embedding_model_id, fingerprint_factors, llm_model_id
from hxd2_ray.errors import ConfigError, HxdError
from hxd2_ray.index_store.manifest import IndexManifest
from hxd2_ray.retrieval.query_config import recorded_config


class RebuildNeededError(HxdError):
    """The update would have to re-extract every chunk; the message lists why and asks for ``--rebuild``."""


def staging_differences(current: IndexManifest, cfg: HxdConfig, prompt_version: str) -> list[str]:
    """What differs between how ``current`` was built and what this run would build, for every chunk's extraction
    (empty: an update can reuse the index's extractions)."""
    out: list[str] = []
    if current.prompt_version != prompt_version:
        out.append(f"the extraction prompts (version {current.prompt_version} -> {prompt_version})")
    try:
        recorded = config_from_data(recorded_config(current.config))
    except ConfigError:
        return [*out, "the recorded config no longer reads in this release"]
    if llm_model_id(recorded.llm) != llm_model_id(cfg.llm):
        out.append(f"the LLM ({llm_model_id(recorded.llm)} -> {llm_model_id(cfg.llm)})")
    if embedding_model_id(recorded.embedding) != embedding_model_id(cfg.embedding):
        out.append(
            f"the embedding model ({embedding_model_id(recorded.embedding)} -> {embedding_model_id(cfg.embedding)})"
        )
    before, after = fingerprint_factors(recorded, "staging"), fingerprint_factors(cfg, "staging")
    out += [f"{key}: {old!r} -> {new!r}" for key, old, new in _changed(before, after)]
    return out


def _changed(before: Any, after: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(before, dict) and isinstance(after, dict):
        found: list[tuple[str, Any, Any]] = []
        for key in sorted(set(before) | set(after)):
            found += _changed(before.get(key), after.get(key), f"{prefix}{key}.")
        return found
    return [] if before == after else [(prefix.rstrip("."), before, after)]


def rebuild_message(output: str, differences: list[str], chunks: int) -> str:
    shown = "; ".join(differences[:8]) + (f"; and {len(differences) - 8} more" if len(differences) > 8 else "")
    return (
        f"{output} was built with what this release and config would build differently: {shown}. Updating it means "
        f"extracting all {chunks:,} chunks again (a full rebuild). Rerun with --rebuild to build the whole input into "
        "a new generation (the current one stays served until then; the LLM cache is kept), or update it with the "
        "release and config it was built with"
    )
