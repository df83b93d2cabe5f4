"""The configuration a command on an index runs with: the given one, or what the index was built with.

An index records the whole config that built it in its manifest (embedding backend, model and dimension, the LLM
and so its tokenizer, retrieval settings). Every command on an existing index (query, eval, serve, an update,
delete, calibrate-refusal, graph) uses it when no ``--config`` is given, so a user never repeats what the index
already knows; ``--set`` overrides apply on top. A config that is given wins, and one that contradicts the index
still fails when the index is opened, naming both sides. A new index with no ``--config`` is built with the shipped
default models (:data:`~hxd2_ray.config.SHIPPED_CONFIG`), never with the test stand-ins.
"""

from __future__ import annotations

from typing import Any, get_args

from hxd2_ray.config import HxdConfig, config_from_data, load_config, load_shipped_config
from hxd2_ray.errors import ConfigError, IndexNotFoundError
from hxd2_ray.index_store.manifest import read_manifest
from hxd2_ray.ingest.sources import resolve_filesystem


def load_query_config(
    index_location: str,
    config_path: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    new_index: bool = False,
    keep_ray: bool = False,
) -> HxdConfig:
    """``config_path`` + overrides when a config is given; otherwise the index's recorded config + overrides.

    ``new_index``: the command may create the index (``hxd2 index``), so a location with no manifest yet means the
    shipped default config; otherwise it raises :class:`~hxd2_ray.errors.IndexNotFoundError`. ``keep_ray``: keep
    the recorded ``ray`` section (a build or an update on the machine that built it). Only the ``s3.*`` overrides
    are applied to reach the manifest: the others are meant for the index's own config (an ``llm.base_url`` is a
    key of the recorded openai backend, not of the built-in defaults).
    """
    if config_path is not None:
        return load_config(config_path, overrides)
    bootstrap = load_config(None, [o for o in overrides if o.startswith("s3.")])
    fs, path = resolve_filesystem(str(index_location), bootstrap.s3)
    try:
        manifest = read_manifest(path, filesystem=fs)
    except IndexNotFoundError:
        if new_index:
            return load_shipped_config(overrides)
        raise
    recorded = recorded_config(manifest.config, keep_ray=keep_ray)
    try:
        return config_from_data(recorded, overrides, source=f"the config recorded in {index_location}/manifest.json")
    except ConfigError as exc:
        raise ConfigError(
            f"{exc}\n  (no --config was given, so the index's own config was used; pass --config "
            "to run with another one)"
        ) from None


def recorded_config(data: dict[str, Any], *, keep_ray: bool = False) -> dict[str, Any]:
    """The recorded config without the keys this version no longer knows (an index built by an older release
    stays queryable) and, unless ``keep_ray``, without the section that describes the build machine, not the
    query (``ray``)."""
    known = HxdConfig.model_fields
    out: dict[str, Any] = {}
    for section, values in (data or {}).items():
        if section not in known or (section == "ray" and not keep_ray):
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
