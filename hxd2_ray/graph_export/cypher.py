"""A Cypher script that rebuilds the graph in the user's own Neo4j (``cypher-shell -f graph.cypher``).

This project never runs it (its own Kùzu queries bind every value as a parameter); it is a file for another
database, so every value is written as a Cypher literal: strings single-quoted with Neo4j's escapes (``\\\\``,
``\\'``, ``\\n``, ``\\r``, ``\\t``, ``\\uXXXX`` for other control and line-separator characters; lone
surrogates, which UTF-8 cannot carry, become U+FFFD), numbers in full precision (non-finite floats as
``null``), lists as list literals. Property names are this schema's constants. Statements: uniqueness
constraints on the three node keys, then ``UNWIND [...] AS row`` batches of ``batch_rows`` rows per kind.
"""

from __future__ import annotations

import math
import re
from typing import Any

from hxd2_ray.graph_export.rows import (
    EDGE_KINDS,
    ENDPOINTS,
    ID_PROPERTY,
    NODE_KINDS,
    PROPERTIES,
    ExportSummary,
    Pages,
    counted_pages,
)
from hxd2_ray.progress import StageCounter

BATCH_ROWS = 500
_SIMPLE_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Characters written as an escape: the quote and backslash, C0/C1 controls, DEL, and the line/paragraph
# separators some tools treat as line breaks. Lone surrogates are replaced first.
_NEEDS_ESCAPE = re.compile("[\\\\'\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class CypherLiterals:
    def __init__(self) -> None:
        self.replaced = 0

    def string(self, value: str) -> str:
        value, n = _SURROGATE.subn("\ufffd", value)
        self.replaced += n
        body = _NEEDS_ESCAPE.sub(lambda m: _SIMPLE_ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), value)
        return f"'{body}'"

    def value(self, value: Any) -> str:
        if value is None:
            return "null"
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int):
            return str(value)
        if isinstance(value, float):
            return repr(value) if math.isfinite(value) else "null"
        if isinstance(value, str):
            return self.string(value)
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(self.value(v) for v in value) + "]"
        raise TypeError(f"no Cypher literal for {type(value).__name__}")

    def map(self, row: dict[str, Any], names: tuple[str, ...]) -> str:
        return "{" + ", ".join(f"{n}: {self.value(row[n])}" for n in names) + "}"


_CONSTRAINTS = (
    "CREATE CONSTRAINT hxd2_document_id IF NOT EXISTS FOR (n:Document) REQUIRE n.id IS UNIQUE;",
    "CREATE CONSTRAINT hxd2_chunk_id IF NOT EXISTS FOR (n:Chunk) REQUIRE n.id IS UNIQUE;",
    "CREATE CONSTRAINT hxd2_entity_key IF NOT EXISTS FOR (n:Entity) REQUIRE n.key IS UNIQUE;",
)
_NODE_STATEMENT = "UNWIND [\n{rows}\n] AS row\nCREATE (n:{kind}) SET n = row;\n"
_EDGE_STATEMENT = (
    "UNWIND [\n{rows}\n] AS row\nMATCH (a:{start_kind} {{{start_id}: row.s}}), (b:{end_kind} {{{end_id}: row.t}})\n"
    "CREATE (a)-[r:{kind}]->(b){set};\n"
)


def write_cypher(pages: Pages, output: str, counter: StageCounter, batch_rows: int = BATCH_ROWS) -> ExportSummary:
    lit = CypherLiterals()
    counts: dict[str, int] = {}
    with open(output, "w", encoding="utf-8", newline="\n") as out:
        out.write(
            "// Knowledge graph exported by `hxd2 graph export --format cypher`.\n"
            "// Load into an empty Neo4j database: cypher-shell -u USER -p PASSWORD -f <this file>\n"
        )
        out.write("\n".join(_CONSTRAINTS) + "\n")
        for kind in NODE_KINDS:
            names = tuple(n for n, _t in PROPERTIES[kind])
            for rows in counted_pages(pages, kind, counts, counter):
                for i in range(0, len(rows), batch_rows):
                    part = rows[i : i + batch_rows]
                    out.write(_NODE_STATEMENT.format(kind=kind, rows=",\n".join(lit.map(r, names) for r in part)))
        for kind in EDGE_KINDS:
            start, end, start_kind, end_kind = ENDPOINTS[kind]
            names = tuple(n for n, _t in PROPERTIES[kind])
            for rows in counted_pages(pages, kind, counts, counter):
                for i in range(0, len(rows), batch_rows):
                    part = rows[i : i + batch_rows]
                    items = ",\n".join(
                        "{s: "
                        + lit.string(r[start])
                        + ", t: "
                        + lit.string(r[end])
                        + (", p: " + lit.map(r, names) if names else "")
                        + "}"
                        for r in part
                    )
                    out.write(
                        _EDGE_STATEMENT.format(
                            rows=items,
                            start_kind=start_kind,
                            start_id=ID_PROPERTY[start_kind],
                            end_kind=end_kind,
                            end_id=ID_PROPERTY[end_kind],
                            kind=kind,
                            set=" SET r = row.p" if names else "",
                        )
                    )
    return ExportSummary(
        format="cypher", output=output, files=[output], counts=counts, replaced_characters=lit.replaced
    )
