"""The embedded Cypher engine behind the graph store (``graph.backend``): the only module that imports one.

* ``kuzu``: Kùzu 0.11.3, the default. Archived upstream in October 2025 (0.11.3 is its last release), but the only
  one of the family with its ``vector``, ``fts`` and ``algo`` extensions built in (this project uses none of them:
  its vectors are Faiss, its lexical channel BM25, its graph walks Python).
* ``ladybug``: LadybugDB (PyPI ``ladybug``), Kùzu's maintained fork: the same engine, DDL and Cypher under another
  name. Its extensions are not built in (``INSTALL`` downloads them at run time), which nothing here needs.

The two are not interchangeable on disk (a database file is written and read by one engine: the manifest records
which, :class:`~hxd2_ray.graph.kuzu_store.KuzuGraphStore` names it on a mismatch), and **not in one process**:
both register the pybind11 type ``Database``, so the second one loaded fails to import (and ladybug then falls
back to a C library its wheel lacks). :func:`graph_engine` refuses that case in one line instead.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from hxd2_ray.errors import HxdError, IndexMismatchError

GraphBackend = Literal["kuzu", "ladybug"]
GRAPH_BACKENDS: tuple[GraphBackend, ...] = ("kuzu", "ladybug")
DEFAULT_GRAPH_BACKEND: GraphBackend = "kuzu"
# The native module each package loads (kuzu when it is imported, ladybug on first use); one per process.
_NATIVE = {"kuzu": "kuzu._kuzu", "ladybug": "ladybug._lbug"}
# What either engine says of the other's database file ("The file is not a valid Lbug/Kuzu database file!").
_FOREIGN_FILE_HINT = "not a valid"


class GraphEngineError(HxdError):
    """The configured graph engine cannot be loaded in this process (not installed, a package of the same name
    that is not the database, or the other engine already loaded)."""


@dataclass(frozen=True)
class GraphEngine:
    """One engine's package: opens databases and connections; everything else is the shared Cypher dialect."""

    name: GraphBackend
    module: ModuleType

    def database(self, path: str | Path, *, read_only: bool, max_threads: int, buffer_pool_bytes: int) -> Any:
        kwargs: dict[str, Any] = dict(
            read_only=read_only, max_num_threads=max_threads, buffer_pool_size=buffer_pool_bytes
        )
        if self.name == "ladybug":
            # Its pybind extension or nothing: "auto" would fall back to a C library the wheel does not ship.
            kwargs["backend"] = "pybind"
        try:
            return self.module.Database(str(path), **kwargs)
        except RuntimeError as exc:
            if Path(path).exists() and _FOREIGN_FILE_HINT in str(exc).lower():
                other = next(b for b in GRAPH_BACKENDS if b != self.name)
                raise IndexMismatchError(
                    f"graph database at {path} cannot be read by {self.name} ({str(exc)[:200]}): it was probably "
                    f"written by {other} (graph.backend={other}); open it with that engine or rebuild the index"
                ) from None
            raise

    def connection(self, database: Any) -> Any:
        return self.module.Connection(database)

    @property
    def version(self) -> str:
        try:
            return metadata.version(self.name)
        except metadata.PackageNotFoundError:
            return "unknown"


_engines: dict[str, GraphEngine] = {}
_lock = threading.Lock()


def graph_engine(name: str = DEFAULT_GRAPH_BACKEND) -> GraphEngine:
    """The engine ``name`` (a ``graph.backend`` value), imported on first use; one clear error when it cannot be."""
    if name not in GRAPH_BACKENDS:
        raise ValueError(f"unknown graph backend {name!r}; valid: {', '.join(GRAPH_BACKENDS)}")
    with _lock:
        engine = _engines.get(name)
        if engine is None:
            engine = GraphEngine(name=name, module=_load(name))
            _engines[name] = engine
        return engine


def _load(name: str) -> ModuleType:
    other = next(b for b in GRAPH_BACKENDS if b != name)
    if _NATIVE[other] in sys.modules:
        raise GraphEngineError(
            f"graph.backend={name}: this process has already loaded {other}, and the two engines cannot share a "
            "process (both register the native type 'Database'); run the other engine's work in its own process"
        )
    module: ModuleType
    try:
        if name == "kuzu":
            import kuzu

            module = kuzu
        else:
            import ladybug

            module = ladybug
    except ImportError as exc:
        raise GraphEngineError(
            f"graph.backend={name}: the package {name!r} is not installed ({exc}); pip install {name} "
            "(pinned in pyproject.toml)"
        ) from None
    if not (callable(getattr(module, "Database", None)) and callable(getattr(module, "Connection", None))):
        raise GraphEngineError(
            f"graph.backend={name}: the installed module {name!r} ({getattr(module, '__file__', '?')}) is not the "
            f"graph database (it has no Database and Connection); another package installs a module of that name "
            f"(for ladybug: ladybug-core, a weather-data library): uninstall it and pip install {name}"
        )
    return module
