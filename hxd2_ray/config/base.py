"""The base of every config section, and the markers that keep a field out of an index's fingerprint.

An index's fingerprint is by exclusion: every field of the config is part of it unless its ``Field`` says
otherwise in ``json_schema_extra`` (a marker is inherited by everything under the field it is on):

- no marker: the field shapes the staged rows (chunks, extractions, merged rows, vectors), so it is part of the
  staging fingerprint and, through it, of the index fingerprint;
- :data:`GRAPH_ONLY`: the field shapes only what the write stage builds from the staged rows (the graph's synonym
  and title edges, the Faiss families): part of the index fingerprint, not of the staging one, so a change rebuilds
  the index from its staged work;
- :data:`MODEL_ID`: a model's location or name, counted as the model id it resolves to
  (``llm_model_id`` / ``embedding_model_id``), so a model moved to another folder does not make indexes stale;
- :data:`NOT_IN_INDEX`: read at query time, or steering only how, where or how fast a job runs: never in a
  fingerprint.

A section whose ``enabled`` field is false counts as ``{"enabled": false}`` (its other fields shape nothing).

A field added after indexes were released carries :data:`ADDED_AT_DEFAULT` (with its level's marker): it counts
only when set away from its default, so adding it leaves every existing index's fingerprint as it was. Without
that, an upgrade alone would make every index "built with other settings", and the next update would build only
its ``--input`` into the new generation.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.fields import FieldInfo

FingerprintScope = Literal["staging", "graph", "model_id", "none"]

GRAPH_ONLY: dict[str, Any] = {"fingerprint": "graph"}
MODEL_ID: dict[str, Any] = {"fingerprint": "model_id"}
NOT_IN_INDEX: dict[str, Any] = {"fingerprint": "none"}
ADDED_AT_DEFAULT: dict[str, Any] = {"omit_at_default": True}

# A marker narrows what it is under, never widens it: a field of a section not in the index is not in it either.
_RANK: dict[str, int] = {"staging": 3, "graph": 2, "model_id": 1, "none": 0}


class FrozenSection(BaseModel):
    """A config section: immutable, and an unknown key is an error that lists the valid ones."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def fingerprint_scope(info: FieldInfo, inherited: FingerprintScope = "staging") -> FingerprintScope:
    """Where the field ``info`` counts, given the scope of the section it is in."""
    extra = info.json_schema_extra
    own: FingerprintScope = extra.get("fingerprint", "staging") if isinstance(extra, dict) else "staging"  # type: ignore[assignment]
    if own not in _RANK:
        raise ValueError(f"unknown fingerprint marker {own!r}; valid: {', '.join(_RANK)}")
    return own if _RANK[own] < _RANK[inherited] else inherited


def fingerprint_factors(
    section: BaseModel, level: Literal["staging", "graph"], scope: FingerprintScope = "staging"
) -> dict[str, Any]:
    """The fields of ``section`` (recursively) whose scope is ``level``, as JSON values; ``scope`` is the
    section's own. Sections with nothing at this level are left out, so adding a field of another level changes
    nothing here."""
    model = type(section)
    enabled = model.model_fields.get("enabled")
    if enabled is not None and fingerprint_scope(enabled, scope) == level and section.enabled is False:  # type: ignore[attr-defined]
        return {"enabled": False}
    dumped = section.model_dump(mode="json")
    factors: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        field_scope = fingerprint_scope(info, scope)
        if _RANK[field_scope] < _RANK[level]:
            continue  # not at this level (a model id is added by the caller); a section may hold fields of lower ones
        value = getattr(section, name)
        if isinstance(value, BaseModel):
            nested = fingerprint_factors(value, level, field_scope)
            if nested:
                factors[name] = nested
        elif isinstance(value, dict) and value and all(isinstance(v, BaseModel) for v in value.values()):
            nested_map = {k: fingerprint_factors(v, level, field_scope) for k, v in value.items()}
            factors[name] = {k: v for k, v in nested_map.items() if v}
        elif field_scope == level:
            extra = info.json_schema_extra
            if isinstance(extra, dict) and extra.get("omit_at_default") and value == info.default:
                continue
            factors[name] = dumped[name]
    return factors
