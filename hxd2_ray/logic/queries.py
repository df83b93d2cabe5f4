"""The logic form's access to the graph: named reads (:mod:`hxd2_ray.graph.templates`), each one traced.

Plan arguments never reach query text: the linker and the executor ask the store for a read by name with
bound parameters (``GraphStore.run_template``), and every read a step makes is recorded in its evidence.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from hxd2_ray.graph.base import EntityRow, GraphStore
from hxd2_ray.graph.templates import LF_NAMES_OF, LOGIC_TEMPLATES

__all__ = ["GraphQueries", "QueryTrace"]


@dataclass(frozen=True, slots=True)
class QueryTrace:
    template: str  # a LOGIC_TEMPLATES name
    params: Mapping[str, Any]
    rows: int
    seconds: float


class GraphQueries:
    """Named-template reads over a graph store; every call is traced for the evidence.

    ``templates``: the named reads this reader may run (all of :data:`LOGIC_TEMPLATES` by default);
    ``clock``: seconds for the traces (a monotonic clock; tests pass their own).
    """

    def __init__(
        self,
        store: GraphStore,
        templates: Mapping[str, frozenset[str]] = LOGIC_TEMPLATES,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.store = store
        self.templates = templates
        self.clock = clock
        self._local = threading.local()

    @property
    def trace(self) -> list[QueryTrace] | None:
        """Where this thread's queries are recorded (set by the executor around a step); None: not traced."""
        trace: list[QueryTrace] | None = getattr(self._local, "trace", None)
        return trace

    @trace.setter
    def trace(self, value: list[QueryTrace] | None) -> None:
        self._local.trace = value

    def run_template(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        if name not in self.templates:
            raise KeyError(f"unknown query template {name!r}; this reader runs {', '.join(self.templates)}")
        started = self.clock()
        rows = self.store.run_template(name, dict(params))
        trace = self.trace
        if trace is not None:
            trace.append(QueryTrace(name, _trace_params(params), len(rows), self.clock() - started))
        return rows

    def get_entities(self, keys: Sequence[str]) -> list[EntityRow]:
        return self.store.get_entities(keys)

    def counts(self) -> dict[str, int]:
        return self.store.counts()

    def names_of(self, keys: Sequence[str]) -> dict[str, str]:
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}
        return {r["key"]: r["name"] for r in self.run_template(LF_NAMES_OF, {"keys": keys})}


def _trace_params(params: Mapping[str, Any], max_items: int = 50) -> dict[str, Any]:
    """Parameters as recorded in the evidence: long lists are cut (the count is kept)."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, list) and len(v) > max_items:
            out[k] = v[:max_items] + [f"... {len(v) - max_items} more"]
        else:
            out[k] = v
    return out
