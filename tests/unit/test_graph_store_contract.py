"""Both graph stores (the engine's, and the resident copy over it) expose the whole GraphStore protocol, with its
signatures, and answer every member of it alike on the same graph (on the engine under test: see test_kuzu_store)."""

from __future__ import annotations

import inspect
from typing import Any, Callable

import pyarrow as pa
import pytest

from hxd2_ray.graph.base import GraphStore
from hxd2_ray.graph.kuzu_store import KuzuGraphStore
from hxd2_ray.graph.read_structures import write_graph_reads_from
from hxd2_ray.graph.resident import ResidentGraph, open_resident
from hxd2_ray.graph.templates import LOGIC_TEMPLATES
from tests.unit.test_kuzu_store import ALL_KEYS, HOSTILE_NAMES, open_store, richer_path  # noqa: F401 - fixture

PROTOCOL = sorted(name for name, member in vars(GraphStore).items() if callable(member) and not name.startswith("_"))


def _parameters(fn: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    sig = inspect.signature(fn)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values() if p.name != "self"]


@pytest.mark.parametrize("store_class", [KuzuGraphStore, ResidentGraph])
def test_store_declares_every_protocol_member(store_class):
    assert "run_template" in PROTOCOL and "warm" in PROTOCOL and "scan_tables" in PROTOCOL
    for name in PROTOCOL:
        assert callable(getattr(store_class, name, None)), f"{store_class.__name__} lacks {name}"
        assert _parameters(getattr(store_class, name)) == _parameters(getattr(GraphStore, name)), name


def _sorted_scan(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    order = {
        "Entity": ["o"],
        "Chunk": ["o"],
        "Document": ["o"],
        "RELATED": ["a", "b"],
        "MENTIONS": ["c", "e"],
        "SYNONYM": ["a", "b"],
        "NAMES_TITLE": ["c", "doc_id"],
    }
    assert set(tables) == set(order)
    return {name: t.sort_by([(c, "ascending") for c in order[name]]) for name, t in tables.items()}


def _calls() -> dict[str, Callable[[GraphStore], Any]]:
    """One call (or several) per protocol member; close is exercised by the context managers."""
    keys = [*ALL_KEYS, "ghost", HOSTILE_NAMES[2]]
    pairs = [("x", "h"), ("ghost", "h"), ("w", "w"), ("y", "z"), ("h", HOSTILE_NAMES[2])]
    lf_pairs = [{"s": "h", "t": "x"}, {"s": "x", "t": "h"}, {"s": "y", "t": "w"}]
    lf_params = {
        "lf_edges": {"keys": keys, "limit": 50},
        "lf_paths_2hop": {"keys": keys, "limit": 50},
        "lf_edges_between": {"pairs": lf_pairs},
        "lf_paths_between": {"pairs": lf_pairs, "limit": 50},
        "lf_entity_names": {"skip": 1, "limit": 4},
        "lf_names_of": {"keys": keys},
    }
    assert set(lf_params) == set(LOGIC_TEMPLATES)
    return {
        "counts": lambda g: g.counts(),
        "get_entities": lambda g: g.get_entities(keys),
        "find_entity_by_name": lambda g: (g.find_entity_by_name("H"), g.find_entity_by_name("h", key_fn=str.lower)),
        "neighbors": lambda g: [g.neighbors(keys, limit_per_entity=n) for n in (None, 0, 1, 3)],
        "get_relations": lambda g: g.get_relations(pairs),
        "chunks_for_entities": lambda g: g.chunks_for_entities(keys),
        "get_chunks": lambda g: g.get_chunks(["c4", "c1", "nope", "c3", "c2", "c5"]),
        "entity_degree": lambda g: g.entity_degree(keys),
        "top_relation_keywords": lambda g: g.top_relation_keywords(5),
        "run_template": lambda g: {name: g.run_template(name, params) for name, params in lf_params.items()},
        "scan_tables": lambda g: _sorted_scan(g.scan_tables()),
        "scan_tables(paged)": lambda g: _sorted_scan(g.scan_tables(page_nodes=2)),
        "warm": lambda g: g.warm(),
    }


@pytest.mark.parametrize("arrays", ["built_in_memory", "mapped_read_structures"])
def test_both_stores_answer_every_member_alike(richer_path, arrays, tmp_path):  # noqa: F811
    calls = _calls()
    assert sorted([*(c for c in calls if "(" not in c), "close"]) == PROTOCOL
    reads_dir = None
    if arrays == "mapped_read_structures":  # written as the index job writes them, then mapped as a reader does
        with open_store(richer_path) as store:
            write_graph_reads_from(store, tmp_path / "reads")
        reads_dir = tmp_path / "reads"
    with open_store(richer_path) as kuzu, open_resident(open_store(richer_path), "on", 1, reads_dir=reads_dir) as mem:
        assert isinstance(mem, ResidentGraph)
        for name, call in calls.items():
            assert call(mem) == call(kuzu), name
        assert kuzu.run_template("lf_entity_names", {"skip": 0, "limit": 100})  # not alike by being empty
        whole, paged = _sorted_scan(kuzu.scan_tables()), _sorted_scan(kuzu.scan_tables(page_nodes=2))
        assert whole.keys() == paged.keys() and all(whole[t].equals(paged[t]) for t in whole)  # pages: the same rows
        assert mem.counts()["entities"] == len(mem.scan_tables()["Entity"]) > 0
