"""The configuration reference, generated from the pydantic models of ``hxd2_ray.config``.

Every field of every model reachable from :class:`HxdConfig` becomes one row (its dotted key as ``--set`` takes it,
type with bounds, default, description), so the page cannot fall behind the code. A section chosen by ``backend``
(``llm``, ``embedding``, ``rerank``) gets one table per backend; a model met a second time (GraphFlow's
``feature_embedding`` is an ``embedding`` section) is linked to, not repeated.
"""

from __future__ import annotations

import json
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from hxd2_ray.config import HxdConfig, fingerprint_scope
from hxd2_ray.config.base import FingerprintScope
from serve.schemas import ServeAppArgs

NO_DESCRIPTION = "*(no description)*"
REQUIRED = "*(required)*"
# A key under a mapping of sections (``cost.prices``) is named by the user; the page writes it this way.
MAPPING_KEY = "<name>"

_BOUNDS = (
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Lt, "lt", "<"),
    (annotated_types.Le, "le", "≤"),
)


@dataclass(frozen=True)
class ConfigKey:
    """One settable key: ``model.field`` in the code, ``key`` in YAML and in ``--set``."""

    key: str
    model: type[BaseModel]
    field: str
    type: str
    default: str
    description: str | None
    scope: FingerprintScope = "staging"  # where it counts in an index's fingerprint (hxd2_ray.config.base)


@dataclass
class ConfigSection:
    """The keys of one model at one place of the config tree. ``owner`` is the model field that is this section
    (``HxdConfig.llm``); None for the sections of a mapping, whose field is a key of its own (``cost.prices``)."""

    key: str
    title: str
    model: type[BaseModel]
    owner: tuple[type[BaseModel], str] | None
    scope: FingerprintScope = "staging"
    keys: list[ConfigKey] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-")

    @property
    def doc(self) -> str:
        own = self.model.__doc__
        return "" if not own or own == BaseModel.__doc__ else _cell(own)


@dataclass(frozen=True)
class _Placement:
    """Where a model is met: under ``key``, titled ``title``, as the field ``owner``, in fingerprint ``scope``."""

    model: type[BaseModel]
    key: str
    title: str
    owner: tuple[type[BaseModel], str] | None
    scope: FingerprintScope = "staging"


def _arms(annotation: Any) -> list[Any]:
    """The alternatives of a union (``X | None``, ``Annotated[Union[...], discriminator]``), else the type itself."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _arms(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return [arm for alt in typing.get_args(annotation) for arm in _arms(alt)]
    return [annotation]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _mapped_model(annotation: Any) -> type[BaseModel] | None:
    """The value model of ``dict[str, Model]``: a mapping of sections the user names."""
    if typing.get_origin(annotation) is dict:
        value = typing.get_args(annotation)[1]
        if _is_model(value):
            return typing.cast(type[BaseModel], value)
    return None


def _placements(
    models: list[type[BaseModel]],
    key: str,
    info: FieldInfo,
    owner: tuple[type[BaseModel], str],
    scope: FingerprintScope = "staging",
) -> list[_Placement]:
    scope = fingerprint_scope(info, scope)
    if len(models) == 1:
        return [_Placement(models[0], key, key, owner, scope)]
    tag = info.discriminator if isinstance(info.discriminator, str) else "backend"
    return [_Placement(m, key, f"{key} ({tag}: {m.model_fields[tag].default})", owner, scope) for m in models]


def _type_alternatives(annotation: Any, sections: dict[type[BaseModel], ConfigSection]) -> list[str]:
    """The type as a YAML author reads it, one entry per alternative: lists, mappings, ``null``, literal choices,
    and links to the sections of nested models."""
    arms = _arms(annotation)
    if len(arms) > 1:
        return [alt for arm in arms for alt in _type_alternatives(arm, sections)]
    if annotation is type(None):
        return ["`null`"]
    if _is_model(annotation):
        section = sections.get(annotation)
        return [f"[`{section.title}`](#{section.anchor})" if section else f"`{annotation.__name__}`"]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return [f"`{json.dumps(a, ensure_ascii=False)}`" for a in args]
    if origin in (tuple, list):
        return [f"`list[{_plain(args[0])}]`"]
    if origin is dict and _is_model(args[1]):
        return [f"mapping of names to {' | '.join(_type_alternatives(args[1], sections))}"]
    if origin is dict:
        return [f"`mapping[str, {_plain(args[1])}]`"]
    return [f"`{_plain(annotation)}`"]


def _plain(annotation: Any) -> str:
    return getattr(annotation, "__name__", str(annotation))


def _bounds(info: FieldInfo) -> str:
    found = []
    for meta in info.metadata:
        for kind, attribute, sign in _BOUNDS:
            if isinstance(meta, kind):
                found.append(f"{sign} {getattr(meta, attribute)}")
        if isinstance(meta, annotated_types.MinLen):
            found.append(f"at least {meta.min_length} item{'s' if meta.min_length != 1 else ''}")
    return ", ".join(found)


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return REQUIRED
    value = to_jsonable_python(info.get_default(call_default_factory=True))
    # JSON is valid YAML flow style: the default as it would be written in a config file.
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _cell(text: str) -> str:
    """One table cell: on one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def config_sections(root: type[BaseModel] = HxdConfig, key: str | None = None) -> list[ConfigSection]:
    """Every section of ``root``'s tree in the order of the models' fields, each model in full where it is first
    met. Without ``key`` the root's fields are the sections (the hxd2 config's ``llm``, ``retrieval``, ...); with
    one, the root is a section of that name (a Serve config's ``args``)."""
    sections: list[ConfigSection] = []
    first_seen: dict[type[BaseModel], ConfigSection] = {}
    fields: list[tuple[ConfigSection, str, FieldInfo]] = []

    def visit(place: _Placement) -> None:
        if place.model in first_seen:
            return
        section = ConfigSection(
            key=place.key, title=place.title, model=place.model, owner=place.owner, scope=place.scope
        )
        sections.append(section)
        first_seen[place.model] = section
        nested: list[_Placement] = []
        for name, info in place.model.model_fields.items():
            key = f"{place.key}.{name}"
            arms = _arms(info.annotation)
            models = [arm for arm in arms if _is_model(arm)]
            nested += _placements(models, key, info, (place.model, name), place.scope) if models else []
            if models and len(models) == len(arms):  # a section of its own, not a value
                continue
            mapped = _mapped_model(info.annotation)
            if mapped is not None:
                mapped_scope = fingerprint_scope(info, place.scope)
                nested.append(_Placement(mapped, f"{key}.{MAPPING_KEY}", f"{key}.{MAPPING_KEY}", None, mapped_scope))
            fields.append((section, name, info))
        for child in nested:
            visit(child)

    if key is not None:
        visit(_Placement(root, key, key, None))
    else:
        for name, info in root.model_fields.items():
            for place in _placements(_arms(info.annotation), name, info, (root, name)):
                visit(place)
    # Types are rendered once every section is known, so a type can link to a section placed after it.
    for section, name, info in fields:
        section.keys.append(
            ConfigKey(
                key=f"{section.key}.{name}",
                model=section.model,
                field=name,
                type=", ".join(
                    filter(None, (" | ".join(_type_alternatives(info.annotation, first_seen)), _bounds(info)))
                ),
                default=_default(info),
                description=info.description,
                scope=fingerprint_scope(info, section.scope),
            )
        )
    return sections


def _tables(sections: list[ConfigSection], level: str) -> list[str]:
    lines = []
    for section in sections:
        lines += [f"{level} `{section.title}` {{#{section.anchor}}}", ""]
        if section.doc:
            lines += [section.doc, ""]
        if section.scope != "staging" and section.keys:
            lines += [_SCOPE_NOTES[section.scope].capitalize() + ".", ""]
        lines += ["| key | type | default | description |", "|---|---|---|---|"]
        lines += [
            f"| `{k.key}` | {_cell(k.type)} | {_cell(k.default)} | "
            f"{_cell(k.description) if k.description else NO_DESCRIPTION}{_scope_note(k, section)} |"
            for k in section.keys
        ]
        lines.append("")
    return lines


# Where a key counts in an index's fingerprint, when not where its section does (hxd2_ray.config.base).
_SCOPE_NOTES: dict[str, str] = {
    "staging": "in the index fingerprint",
    "graph": "in the index fingerprint, not the staging one: a change rebuilds the index from its staged work",
    "model_id": "in the index fingerprint as the model id it resolves to",
    "none": "not in the index fingerprint: a change never rebuilds an index",
}


def _scope_note(key: ConfigKey, section: ConfigSection) -> str:
    return "" if key.scope == section.scope else f" *({_SCOPE_NOTES[key.scope]})*"


def reference_sections() -> dict[str, list[ConfigSection]]:
    """The two trees the page documents: the hxd2 config, and the ``args`` of the Serve application."""
    return {"hxd2": config_sections(HxdConfig), "serve": config_sections(ServeAppArgs, key="args")}


def config_reference_page() -> str:
    trees = reference_sections()
    sections = trees["hxd2"]
    keys = [k for s in sections for k in s.keys]
    undescribed = sum(1 for k in keys if not k.description)
    required = ", ".join(f"`{k.key}`" for k in keys if k.default == REQUIRED) or "none"
    serve_keys = [k for s in trees["serve"] for k in s.keys]
    lines = [
        "# Configuration reference",
        "",
        "Generated from the pydantic models in `hxd2_ray/config/` and `serve/schemas.py` each time the site is "
        "built (`docs/hooks/config_reference.py`), so it lists exactly what the code accepts: "
        f"{len(keys)} keys of the hxd2 config in {len(sections)} sections"
        + (f" ({undescribed} still marked {NO_DESCRIPTION})" if undescribed else "")
        + f", then the {len(serve_keys)} keys of a Serve application's `args`.",
        "",
        "## The hxd2 config",
        "",
        "A config is a YAML file of these sections, given with `--config FILE`. A file names only what it changes: "
        f"every key has a default but those marked {REQUIRED} ({required}). `--set section.key=value` overrides "
        "one key on the command line; the value is YAML, so `--set 'llm={backend: scripted}'` replaces a whole "
        "section. An unknown key or a bad value fails with the valid keys or values listed. An index records the "
        "config it was built with, and `hxd2 query`, `hxd2 eval` and `hxd2 serve` use that one when no "
        "`--config` is given. [Getting started](../getting-started.md#configuration) introduces the two shipped "
        "files.",
        "",
        "A section chosen by `backend` has one table per backend. In the type column `list[...]` is a YAML list "
        "and `null` is YAML's null; bounds follow the type.",
        "",
        "An index records a fingerprint of what shaped it: every key is part of it unless its section or its row "
        "says otherwise (`hxd2_ray/config/base.py`). `hxd2 index` into an index of another fingerprint refuses, or, "
        "when only keys of the final graph and its vector shards changed, builds it again from its staged work.",
        "",
        *_tables(sections, "###"),
        "## The Serve application's `args`",
        "",
        "The `args` block of an application in a Serve config file (`configs/serve.yaml`, the `serveConfigV2` of "
        "`cluster/kuberay/rayservice.yaml`), validated when the app is built; `hxd2 serve` fills it from its "
        "flags and the Serve config. Deployment sizes are Serve's own keys under `deployments:`; see "
        "[Serve and autoscale](../how-to/serving.md).",
        "",
        *_tables(trees["serve"], "###"),
    ]
    return "\n".join(lines)
