"""Named graph reads: what a caller may ask :meth:`GraphStore.run_template <hxd2_ray.graph.base.GraphStore>` for.

A caller names a read and binds its parameters; it never holds query text, so nothing from a plan, a question
or an LLM can reach Cypher. Each store runs a name its own way: Kùzu per key or pair with the fixed templates
of :mod:`hxd2_ray.graph.kuzu_store` (primary-key lookups), the resident graph through the Kùzu store it was
loaded from. The logic-form executor (:mod:`hxd2_ray.logic`) is the caller today.

==================== ==================== ==============================================================
name                 parameters           rows
==================== ==================== ==============================================================
``lf_edges``         ``keys``, ``limit``  an edge at a key (either direction): ``a_key a_name b_key b_name
                                          description keywords`` (``a`` the key); at most ``limit`` in all
``lf_paths_2hop``    ``keys``, ``limit``  a 2-hop path a - m - b from a key (``b`` not the key): ``a_key
                                          a_name m_key m_name b_key b_name d1 k1 d2 k2``; at most ``limit``
``lf_edges_between`` ``pairs``            an edge between ``p["s"]`` and ``p["t"]`` of a pair, as ``lf_edges``
``lf_paths_between`` ``pairs``, ``limit`` a 2-hop path s - m - t of a pair, as ``lf_paths_2hop``
``lf_entity_names``  ``skip``, ``limit``  a page of ``key name`` rows over all entities in key order
``lf_names_of``      ``keys``             ``key name`` of each known key
==================== ==================== ==============================================================

Keys come back in the order given, each key's rows in engine order; a repeated key repeats its rows.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

__all__ = [
    "LF_EDGES",
    "LF_EDGES_BETWEEN",
    "LF_ENTITY_NAMES",
    "LF_NAMES_OF",
    "LF_PATHS_2HOP",
    "LF_PATHS_BETWEEN",
    "LOGIC_TEMPLATES",
    "check_template",
]

LF_EDGES = "lf_edges"
LF_PATHS_2HOP = "lf_paths_2hop"
LF_EDGES_BETWEEN = "lf_edges_between"
LF_PATHS_BETWEEN = "lf_paths_between"
LF_ENTITY_NAMES = "lf_entity_names"
LF_NAMES_OF = "lf_names_of"

# Template name -> the parameters it binds (all of them, nothing else: an unbound parameter must never run).
LOGIC_TEMPLATES: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        LF_EDGES: frozenset({"keys", "limit"}),
        LF_PATHS_2HOP: frozenset({"keys", "limit"}),
        LF_EDGES_BETWEEN: frozenset({"pairs"}),
        LF_PATHS_BETWEEN: frozenset({"pairs", "limit"}),
        LF_ENTITY_NAMES: frozenset({"skip", "limit"}),
        LF_NAMES_OF: frozenset({"keys"}),
    }
)


def check_template(name: str, params: Mapping[str, Any]) -> None:
    """Raise ``KeyError`` for an unknown name and ``ValueError`` unless ``params`` are exactly its parameters."""
    expected = LOGIC_TEMPLATES.get(name)
    if expected is None:
        raise KeyError(f"unknown query template {name!r}; known: {', '.join(LOGIC_TEMPLATES)}")
    if set(params) != expected:
        raise ValueError(f"template {name!r} takes parameters {sorted(expected)}, got {sorted(params)}")
