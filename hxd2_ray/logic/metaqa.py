"""MetaQA (and any ``subject|relation|object`` triple file) straight into the graph.

The question files are read by :func:`hxd2_ray.evaluation.datasets.load_metaqa`, the project's one MetaQA question
loader.

No NER: every subject and object becomes an entity with ``key = entity_key(name)`` (the merge stage's
normaliser, so a question's name links exactly), and every triple becomes a fact on the ``RELATED`` edge of
its (unordered) pair, written in the ENTITIES / RELATIONS staging schemas of :mod:`hxd2_ray.graph.schema`
and loaded with the project's own :func:`~hxd2_ray.graph.kuzu_store.load_graph`.

Direction. ``RELATED`` keeps one edge per unordered pair (``source_key < target_key``), but MetaQA relations
are directional ("movie directed_by person"). The loader keeps the direction in the edge description, one
line per triple in the form ``"Subject --relation--> Object"`` (:func:`~hxd2_ray.logic.facts.directed_fact_line`);
the relation name itself goes into ``keywords`` (what the relation_keywords vector family and predicate
matching see), and several triples between the same pair (a movie directed *and* written by one person)
merge into one edge whose keywords are the union and whose description has one line per triple. The
executor reads the lines back (matching both ends against the edge's entities, so names containing
arrows cannot confuse it) and honours the direction. The description was chosen over a direction flag or
marker keywords because it needs no schema change, survives the canonical re-orientation of the pair,
stays readable in the dual-level context tables, and keeps the keywords clean for embedding.

Numbers are entities too: "release_year" points at the entity "1971"; the executor parses numbers from
entity names (:func:`~hxd2_ray.logic.facts.parse_number`). The hand-made numeric test graph uses the
same convention ("Zhefu 802" --height_cm--> "85").
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Collection, Iterable, Iterator, Mapping

import pyarrow as pa

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.extraction.merge import entity_key
from hxd2_ray.graph import schema as tables
from hxd2_ray.logic.facts import directed_fact_line

__all__ = [
    "METAQA_OBJECT_TYPES",
    "Triple",
    "build_graph",
    "empty_chunks",
    "empty_documents",
    "load_kb_triples",
    "read_triples",
    "triples_to_tables",
]

# Entity type of a relation's object; subjects are movies.
METAQA_OBJECT_TYPES: Mapping[str, str] = {
    "directed_by": "person",
    "written_by": "person",
    "starred_actors": "person",
    "has_genre": "genre",
    "in_language": "language",
    "release_year": "year",
    "has_tags": "tag",
    "has_imdb_rating": "rating",
    "has_imdb_votes": "votes",
}


@dataclass(frozen=True, slots=True)
class Triple:
    subject: str
    relation: str
    object: str


def _split_line(line: str, lineno: int, path: str) -> Triple:
    parts = line.split("|")
    if len(parts) == 3:
        return Triple(parts[0].strip(), parts[1].strip(), parts[2].strip())
    # A name containing "|": the relation is the one field that looks like a relation name.
    idx = [i for i in range(1, len(parts) - 1) if re.fullmatch(r"[a-z][a-z0-9_]*", parts[i].strip())]
    if len(parts) < 3 or len(idx) != 1:
        raise ValueError(f"{path}:{lineno}: expected subject|relation|object, got {line[:120]!r}")
    i = idx[0]
    return Triple("|".join(parts[:i]).strip(), parts[i].strip(), "|".join(parts[i + 1 :]).strip())


def iter_triples(path: str | os.PathLike[str], malformed: list[str] | None = None) -> Iterator[Triple]:
    """Triples in file order. A line that is not ``subject|relation|object`` raises ``ValueError`` unless
    ``malformed`` is given: then it is skipped and its reason appended there (so is a line with an empty
    field, which is otherwise skipped silently)."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            try:
                t = _split_line(line, lineno, str(path))
            except ValueError as exc:
                if malformed is None:
                    raise
                malformed.append(str(exc))
                continue
            if t.subject and t.relation and t.object:
                yield t
            elif malformed is not None:
                malformed.append(f"{path}:{lineno}: empty subject, relation or object in {line[:120]!r}")


def read_triples(
    path: str | os.PathLike[str],
    *,
    limit_entities: int | None = None,
    subjects: Collection[str] | None = None,
    cfg: ExtractionConfig | None = None,
    malformed: list[str] | None = None,
) -> list[Triple]:
    """Triples of a ``subject|relation|object`` file, in file order, deduplicated.

    ``malformed``: collect (and skip) bad lines instead of raising; see :func:`iter_triples`.

    ``subjects``: keep only triples whose subject is one of these names (compared by entity key).
    ``limit_entities``: a closed subgraph of at most this many entities: a triple is kept while both of its
    ends are already admitted or there is still room to admit the new ones (file order decides).
    """
    cfg = cfg or ExtractionConfig()
    keys: dict[str, str] = {}  # surface -> key; names repeat a lot (43k distinct in 129k MetaQA triples)

    def key(name: str) -> str:
        k = keys.get(name)
        if k is None:
            k = keys[name] = entity_key(name, cfg)
        return k

    wanted = {key(s) for s in subjects} if subjects is not None else None
    admitted: set[str] = set()
    seen: set[Triple] = set()
    out: list[Triple] = []
    for t in iter_triples(path, malformed):
        if wanted is not None and key(t.subject) not in wanted:
            continue
        if limit_entities is not None:
            new = {key(t.subject), key(t.object)} - admitted
            if len(admitted) + len(new) > limit_entities:
                continue
            admitted |= new
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def _most_common(counts: Counter[str]) -> str:
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def triples_to_tables(
    triples: Iterable[Triple | tuple[str, str, str]],
    *,
    cfg: ExtractionConfig | None = None,
    subject_type: str = "movie",
    object_types: Mapping[str, str] = METAQA_OBJECT_TYPES,
    default_type: str = "unknown",
    source_label: str = "MetaQA movie knowledge base",
) -> tuple[pa.Table, pa.Table]:
    """(entities, relations) Arrow tables in the ENTITIES / RELATIONS schemas, sorted by key.

    Entities: name = most frequent surface form of the key; type = majority of the roles it plays (subject:
    ``subject_type``; object: ``object_types[relation]`` or ``default_type``); mention_count = triples it
    is in; no source chunks. Relations: one row per unordered pair: keywords = sorted union of relation
    names, description = sorted ``"S --rel--> O"`` lines, weight = mention_count = number of triples.
    Triples whose two ends share a key (self-loops) are dropped.
    """
    cfg = cfg or ExtractionConfig()
    limit = cfg.max_entity_name_chars
    names: dict[str, Counter[str]] = {}
    types: dict[str, Counter[str]] = {}
    mentions: Counter[str] = Counter()
    truncated: dict[str, bool] = {}
    pairs: dict[tuple[str, str], dict[str, set[str]]] = {}
    seen: set[tuple[str, str, str]] = set()
    for t in triples:
        s, r, o = (t.subject, t.relation, t.object) if isinstance(t, Triple) else t
        if (s, r, o) in seen:
            continue
        seen.add((s, r, o))
        sk, ok = entity_key(s, cfg), entity_key(o, cfg)
        if not sk or not ok or sk == ok:
            continue
        for key, surface, typ in ((sk, s, subject_type), (ok, o, object_types.get(r, default_type))):
            names.setdefault(key, Counter())[surface[:limit]] += 1
            types.setdefault(key, Counter())[typ] += 1
            mentions[key] += 1
            truncated[key] = truncated.get(key, False) or len(surface) > limit
        pair = (sk, ok) if sk <= ok else (ok, sk)
        slot = pairs.setdefault(pair, {"keywords": set(), "lines": set()})
        slot["keywords"].add(r)
        slot["lines"].add(directed_fact_line(s[:limit], r, o[:limit]))

    ent_rows = []
    for key in sorted(names):
        typ = _most_common(types[key])
        ent_rows.append(
            {
                "key": key,
                "name": _most_common(names[key]),
                "type": typ,
                "description": f"{typ} in the {source_label}",
                "source_chunk_ids": [],
                "mention_count": int(mentions[key]),
                "name_truncated": truncated[key],
            }
        )
    rel_rows = []
    for a, b in sorted(pairs):
        slot = pairs[(a, b)]
        n = len(slot["lines"])
        rel_rows.append(
            {
                "source_key": a,
                "target_key": b,
                "description": "\n".join(sorted(slot["lines"])),
                "keywords": sorted(slot["keywords"]),
                "weight": float(n),
                "source_chunk_ids": [],
                "mention_count": n,
            }
        )
    return (
        pa.Table.from_pylist(ent_rows, schema=tables.ENTITIES),
        pa.Table.from_pylist(rel_rows, schema=tables.RELATIONS),
    )


def load_kb_triples(
    path: str | os.PathLike[str],
    limit_entities: int | None = None,
    *,
    subjects: Collection[str] | None = None,
    cfg: ExtractionConfig | None = None,
) -> tuple[pa.Table, pa.Table]:
    """MetaQA ``kb.txt`` -> (entities, relations) tables; see :func:`read_triples` for the subset options."""
    return triples_to_tables(read_triples(path, limit_entities=limit_entities, subjects=subjects, cfg=cfg), cfg=cfg)


def empty_documents() -> pa.Table:
    return tables.DOCUMENTS.empty_table()


def empty_chunks() -> pa.Table:
    return tables.CHUNKS.empty_table()


def build_graph(graph_path: str | os.PathLike[str], entities: pa.Table, relations: pa.Table) -> dict[str, int]:
    """Load a KB graph (no documents, no chunks) into a fresh Kùzu database with the project's loader."""
    from hxd2_ray.graph.kuzu_store import load_graph

    return load_graph(graph_path, empty_documents(), empty_chunks(), entities, relations)
