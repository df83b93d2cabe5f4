"""The configuration a reader of an index queries with: the given one, or what the index was built with.

An index records the whole config that built it in its manifest (embedding backend, model and dimension, the LLM
and so its tokenizer, retrieval settings). ``hxd2 query``, ``hxd2 eval`` and Serve use it when no ``--config`` is
given, so a user never repeats what the index already knows; ``--set`` overrides still apply on top. A config that
is given wins, and one that contradicts the index still fails when the index is opened, naming both sides.
"""

from __future__ import annotations

from typing import Any, get_args

from hxd2_ray.config import HxdConfig, config_from_data, load_config
from hxd2_ray.errors import ConfigError
from hxd2_ray.indexing.manifest import read_manifest
from hxd2_ray.ingest.sources import resolve_filesystem


def load_query_config(
    index_location: str, config_path: str | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> HxdConfig:
    """``config_path`` + overrides when a config is given; otherwise the index's recorded config + overrides.

    The overrides are applied first on their own, so that an ``s3.*`` override can reach an index on S3 to read
    its manifest. Raises :class:`~hxd2_ray.errors.IndexNotFoundError` when there is no readable manifest.
    """
    if config_path is not None:
        return load_config(config_path, overrides)
    bootstrap = load_config(None, overrides)
    fs, path = resolve_filesystem(str(index_location), bootstrap.s3)
    manifest = read_manifest(path, filesystem=fs)
    recorded = recorded_config(manifest.config)
    try:
        return config_from_data(recorded, overrides, source=f"the config recorded in {index_location}/manifest.json")
    except ConfigError as exc:
        raise ConfigError(
            f"{exc}\n  (no --config was given, so the index's own config was used; pass --config "
            "to query with another one)"
        ) from None


def recorded_config(data: dict[str, Any]) -> dict[str, Any]:
    """The recorded config without the keys this version no longer knows (an index built by an older release
    stays queryable) and without the sections that describe the build machine, not the query (``ray``)."""
    known = HxdConfig.model_fields
    out: dict[str, Any] = {}
    for section, values in (data or {}).items():
        if section not in known or section == "ray":
            continue
        model = _section_model(section, values)
        if isinstance(values, dict) and model is not None:
            out[section] = {k: v for k, v in values.items() if k in model.model_fields}
        else:
            out[section] = values
    return out


def _section_model(section: str, values: Any) -> Any:
    """The pydantic model of a section (for a discriminated union: the member named by ``backend``)."""
    default = getattr(HxdConfig(), section)
    if section in ("llm", "embedding") and isinstance(values, dict):
        for member in get_args(HxdConfig.model_fields[section].annotation):
            tag = member.model_fields.get("backend")
            if tag is not None and tag.default == values.get("backend"):
                return member
        return None
    return type(default)
