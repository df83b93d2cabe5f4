"""The graph a GraphFlow policy walks: entities and chunks as one node space, every move a CSR entry.

A node is an entity (offsets ``0..n_entities-1``, the resident graph's entity offsets) or a chunk (offsets
``n_entities..``). The actions from a node are its CSR entries ``ptr[u]:ptr[u+1]``, each a target node and a
*relation signature*: what the move means seen from ``u``. On a RELATED edge the signature is the set of the
edge's facts as ``(label, direction)`` pairs, ``out`` when ``u`` is the fact's subject, ``in`` when it is the
object, ``none`` for a fact without direction (keywords of an NER edge with no ``S --rel--> O`` line); MetaQA's
"movie directed_by person" is ``directed by/out`` from the movie and ``directed by/in`` from the person, which is
what lets the policy tell "films directed by X" from "the director of X". Chunks are reached through MENTIONS:
``mentioned in passage`` from an entity, ``mentions`` back from the chunk. STOP is not an entry; every node has it.

Built once per index from :meth:`hxd2_ray.graph.resident.ResidentGraph.arrays` (the facts parsed with the
logic form's own :func:`~hxd2_ray.logic.executor.edge_facts`) and cached with the features
(:mod:`hxd2_ray.graphflow.features`); plain numpy. A graph read from that cache holds its keys, names and chunk
sources as :class:`StringColumn` (UTF-8 bytes and offsets, memory-mapped) instead of Python lists.
"""

from __future__ import annotations

import bisect
import operator
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence, overload

import numpy as np

from hxd2_ray.logic.facts import edge_facts

__all__ = ["MENTIONED_IN", "MENTIONS", "Signature", "StringColumn", "WalkGraph"]

Signature = tuple[tuple[str, str], ...]  # sorted (label, direction) pairs; direction: out | in | none
MENTIONED_IN: Signature = (("mentioned in passage", "none"),)
MENTIONS: Signature = (("mentions", "none"),)
CHUNK_TYPE = "passage"


def relation_label(predicate: str) -> str:
    """What a relation name reads as: MetaQA's ``directed_by`` -> ``directed by``."""
    return " ".join(predicate.replace("_", " ").split()) or "related"


class StringColumn(Sequence[str]):
    """A read-only sequence of strings kept as two arrays, ``data`` (their UTF-8 bytes, uint8) and ``offsets``
    (int64, ``len + 1``): string ``i`` is decoded when asked, so a column memory-mapped from the feature cache costs
    no memory per item. ``order`` (positions sorted by their bytes, stable) makes :meth:`find` a binary search."""

    __slots__ = ("data", "offsets", "order")

    def __init__(self, data: np.ndarray, offsets: np.ndarray, order: np.ndarray | None = None) -> None:
        if len(offsets) < 1 or (order is not None and len(order) != len(offsets) - 1):
            raise ValueError("a string column needs len + 1 offsets (and len positions in its order)")
        self.data, self.offsets, self.order = data, offsets, order

    @classmethod
    def of(cls, strings: Sequence[str], *, ordered: bool = False) -> "StringColumn":
        encoded = [s.encode("utf-8") for s in strings]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        order = np.array(sorted(range(len(encoded)), key=encoded.__getitem__), dtype=np.int64) if ordered else None
        return cls(data, offsets, order)

    def _bytes(self, i: int) -> bytes:
        return self.data[int(self.offsets[i]) : int(self.offsets[i + 1])].tobytes()

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        j = operator.index(i)
        n = len(self)
        if not -n <= j < n:
            raise IndexError(f"string {j} of a column of {n}")
        return self._bytes(j % n).decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        for i in range(len(self)):
            yield self._bytes(i).decode("utf-8")

    def find(self, s: str) -> int | None:
        """The position of ``s`` (the last one, as a dict built in order would keep), or None."""
        if self.order is None:
            raise ValueError("this string column has no order to search")
        target = s.encode("utf-8")
        at = bisect.bisect_right(self.order, target, key=lambda pos: self._bytes(int(pos))) - 1
        return int(self.order[at]) if at >= 0 and self._bytes(int(self.order[at])) == target else None


@dataclass(frozen=True)
class WalkGraph:
    keys: Sequence[str]  # node -> entity key or chunk id (a list; a StringColumn when read from the cache)
    names: Sequence[str]  # node -> what a person reads (entity name; chunk: its document's title or id)
    n_entities: int
    node_type: np.ndarray  # node -> type id (int32)
    type_names: list[str]
    ptr: np.ndarray  # node u's actions are entries ptr[u]:ptr[u+1] (int64, n_nodes + 1)
    target: np.ndarray  # entry -> node reached (int32)
    sig: np.ndarray  # entry -> relation signature id (int32)
    signatures: list[Signature]
    chunk_sources: Sequence[str] = field(default_factory=list)  # chunk (node - n_entities) -> its document's source id
    _index_of: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self._index_of and not isinstance(self.keys, StringColumn):  # a column is searched, not indexed
            self._index_of.update((k, i) for i, k in enumerate(self.keys))

    # ------------------------------------------------------------------------------------------ reads

    @property
    def n_nodes(self) -> int:
        return len(self.keys)

    @property
    def n_entries(self) -> int:
        return int(self.ptr[-1])

    def node_of(self, key: str) -> int | None:
        if isinstance(self.keys, StringColumn):
            return self.keys.find(key)
        return self._index_of.get(key)

    def is_chunk(self, node: int) -> bool:
        return node >= self.n_entities

    def degree(self) -> np.ndarray:
        return np.diff(self.ptr)

    def entries(self, node: int) -> range:
        return range(int(self.ptr[node]), int(self.ptr[node + 1]))

    def neighbours(self, node: int) -> np.ndarray:
        return self.target[self.ptr[node] : self.ptr[node + 1]]

    def describe_entry(self, entry: int) -> str:
        """The relation of an entry as text: ``directed by`` (out), ``<-directed by`` (in), ``~mentions`` (none)."""
        parts = []
        for label, direction in self.signatures[int(self.sig[entry])]:
            parts.append({"out": label, "in": f"<-{label}", "none": f"~{label}"}[direction])
        return " & ".join(parts)

    def chunks_of_sources(self) -> dict[str, list[int]]:
        """Document source id -> its chunk nodes (how gold passages become targets)."""
        out: dict[str, list[int]] = {}
        for i, source in enumerate(self.chunk_sources):
            out.setdefault(source, []).append(self.n_entities + i)
        return out

    # ------------------------------------------------------------------------------------------ build

    @classmethod
    def from_edges(
        cls,
        keys: Sequence[str],
        edges: Sequence[tuple[int, int, Signature]],
        *,
        names: Sequence[str] | None = None,
        types: Sequence[str] | None = None,
        n_entities: int | None = None,
        chunk_sources: Sequence[str] = (),
    ) -> "WalkGraph":
        """A graph from directed moves ``(u, v, signature)`` (both directions must be listed); for synthetic
        graphs and as the common end of :meth:`from_resident`. Entries keep the given order within a node."""
        n = len(keys)
        src = np.fromiter((u for u, _, _ in edges), dtype=np.int64, count=len(edges))
        dst = np.fromiter((v for _, v, _ in edges), dtype=np.int64, count=len(edges))
        sig_ids: dict[Signature, int] = {}
        sig = np.fromiter((sig_ids.setdefault(s, len(sig_ids)) for _, _, s in edges), dtype=np.int64, count=len(edges))
        if len(edges) and (src.min() < 0 or dst.min() < 0 or src.max() >= n or dst.max() >= n):
            raise ValueError("an edge names a node outside 0..len(keys)-1")
        type_list = list(types) if types is not None else ["node"] * n
        type_ids: dict[str, int] = {}
        node_type = np.fromiter(
            (type_ids.setdefault(t or "unknown", len(type_ids)) for t in type_list), dtype=np.int32, count=n
        )
        return cls._assemble(
            list(keys),
            list(names) if names is not None else list(keys),
            n if n_entities is None else n_entities,
            node_type,
            list(type_ids),
            src,
            dst,
            sig,
            list(sig_ids),
            list(chunk_sources),
        )

    @classmethod
    def _assemble(
        cls,
        keys: list[str],
        names: list[str],
        n_entities: int,
        node_type: np.ndarray,
        type_names: list[str],
        src: np.ndarray,
        dst: np.ndarray,
        sig: np.ndarray,
        signatures: list[Signature],
        chunk_sources: list[str],
    ) -> "WalkGraph":
        order = np.argsort(src, kind="stable")
        ptr = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=len(keys)), out=ptr[1:])
        return cls(
            keys=keys,
            names=names,
            n_entities=n_entities,
            node_type=node_type,
            type_names=type_names,
            ptr=ptr,
            target=dst[order].astype(np.int32),
            sig=sig[order].astype(np.int32),
            signatures=signatures,
            chunk_sources=chunk_sources,
        )

    @classmethod
    def from_resident(cls, arrays: Any, chunk_rows: Sequence[Mapping[str, Any]] = ()) -> "WalkGraph":
        """The walk graph of a resident graph (:class:`~hxd2_ray.graph.resident.ResidentArrays`).

        ``chunk_rows``: :meth:`get_chunks` rows of every chunk (for names and source ids); chunks missing there
        are named by their id.
        """
        keys = list(arrays.entity_keys)
        n_ent = len(keys)
        ent_names = arrays.entities["name"].to_pylist() if n_ent else []
        ent_types = arrays.entities["type"].to_pylist() if n_ent else []
        chunk_ids = list(arrays.chunk_ids)
        by_chunk = {r["id"]: r for r in chunk_rows}
        chunk_names = [
            by_chunk[c]["doc_title"] or by_chunk[c]["doc_source_id"] or c if c in by_chunk else c for c in chunk_ids
        ]
        chunk_sources = [
            by_chunk[c]["doc_source_id"] or by_chunk[c]["doc_id"] if c in by_chunk else c for c in chunk_ids
        ]

        # RELATED: every adjacency entry (each edge under both ends) with the signature seen from its owner.
        owner = np.repeat(np.arange(n_ent, dtype=np.int64), np.diff(arrays.adj_ptr))
        edge_of_entry = arrays.adj_edge.astype(np.int64)
        n_edges = len(arrays.edge_source)
        other_end = np.empty(n_edges, dtype=np.int64)
        stored_side = owner == arrays.edge_source[edge_of_entry]
        other_end[edge_of_entry[stored_side]] = arrays.adj_other[stored_side]
        self_loop = np.zeros(n_edges, dtype=bool)
        self_loop[edge_of_entry[owner == arrays.adj_other]] = True
        other_end[self_loop] = arrays.edge_source[self_loop]
        descriptions = arrays.edges["description"].to_pylist() if n_edges else []
        keywords = arrays.edges["keywords"].to_pylist() if n_edges else []
        sig_ids: dict[Signature, int] = {}
        sig_of_side = np.zeros((n_edges, 2), dtype=np.int64)  # [edge, 0]: from the stored end; [edge, 1]: other
        for e in range(n_edges):
            a, b = int(arrays.edge_source[e]), int(other_end[e])
            facts = edge_facts(keys[a], ent_names[a], keys[b], ent_names[b], descriptions[e] or "", keywords[e] or [])
            for side, me in ((0, keys[a]), (1, keys[b])):
                labels = tuple(
                    sorted(
                        {
                            (
                                relation_label(f.predicate),
                                ("out" if f.subject_key == me else "in") if f.directed else "none",
                            )
                            for f in facts
                        }
                    )
                )
                sig_of_side[e, side] = sig_ids.setdefault(labels, len(sig_ids))
        rel_sig = sig_of_side[edge_of_entry, np.where(stored_side, 0, 1)]

        # MENTIONS both ways.
        men_entity = np.repeat(np.arange(n_ent, dtype=np.int64), np.diff(arrays.mention_ptr))
        men_chunk = arrays.mention_chunk.astype(np.int64) + n_ent
        mentioned_in = sig_ids.setdefault(MENTIONED_IN, len(sig_ids))
        mentions = sig_ids.setdefault(MENTIONS, len(sig_ids))
        src = np.concatenate([owner, men_entity, men_chunk])
        dst = np.concatenate([arrays.adj_other.astype(np.int64), men_chunk, men_entity])
        sig = np.concatenate([rel_sig, np.full(len(men_chunk), mentioned_in), np.full(len(men_chunk), mentions)])

        type_ids: dict[str, int] = {}
        node_type = np.fromiter(
            (type_ids.setdefault(t or "unknown", len(type_ids)) for t in [*ent_types, *[CHUNK_TYPE] * len(chunk_ids)]),
            dtype=np.int32,
            count=n_ent + len(chunk_ids),
        )
        return cls._assemble(
            keys + chunk_ids,
            ent_names + chunk_names,
            n_ent,
            node_type,
            list(type_ids),
            src,
            dst,
            sig,
            list(sig_ids),
            chunk_sources,
        )

    # ------------------------------------------------------------------------------------------ storage

    def to_arrays(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """(numpy arrays, JSON-able lists) for the feature cache; the keys, names and chunk sources are arrays
        (:class:`StringColumn`'s ``data``/``offsets``, the keys with their ``order``) so a reader can map them."""
        arrays = {"ptr": self.ptr, "target": self.target, "sig": self.sig, "node_type": self.node_type}
        for name, strings in (("keys", self.keys), ("names", self.names), ("chunk_sources", self.chunk_sources)):
            ordered = name == "keys"  # node_of searches the keys
            column = strings if isinstance(strings, StringColumn) else StringColumn.of(strings)
            if ordered and column.order is None:
                column = StringColumn.of(list(column), ordered=True)
            arrays[f"{name}-data"], arrays[f"{name}-offsets"] = column.data, column.offsets
            if ordered and column.order is not None:
                arrays[f"{name}-order"] = column.order
        meta = {
            "n_entities": self.n_entities,
            "type_names": self.type_names,
            "signatures": [[list(p) for p in s] for s in self.signatures],
        }
        return arrays, meta

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> "WalkGraph":
        """The graph of :meth:`to_arrays`' output; arrays of the right dtypes (memory maps) are kept, not copied."""

        def column(name: str) -> StringColumn:
            return StringColumn(
                np.asarray(arrays[f"{name}-data"], dtype=np.uint8),
                np.asarray(arrays[f"{name}-offsets"], dtype=np.int64),
                np.asarray(arrays[f"{name}-order"], dtype=np.int64) if f"{name}-order" in arrays else None,
            )

        return cls(
            keys=column("keys"),
            names=column("names"),
            n_entities=int(meta["n_entities"]),
            node_type=np.asarray(arrays["node_type"], dtype=np.int32),
            type_names=list(meta["type_names"]),
            ptr=np.asarray(arrays["ptr"], dtype=np.int64),
            target=np.asarray(arrays["target"], dtype=np.int32),
            sig=np.asarray(arrays["sig"], dtype=np.int32),
            signatures=[tuple((str(a), str(b)) for a, b in s) for s in meta["signatures"]],
            chunk_sources=column("chunk_sources"),
        )
