"""GraphML (Gephi, yEd, networkx ``read_graphml``): one directed graph with every node and edge kind.

Node ids are ``entity:<key>``, ``chunk:<id>`` and ``document:<id>`` (the kinds' keys may coincide); every node
has ``kind`` and a ``label`` (entity name, document title, chunk id) for the viewers, then its properties.
Every edge has ``label`` = RELATED, MENTIONS or PART_OF; RELATED edges run from the smaller entity key to the
larger (the stored orientation) and carry their properties. String lists are JSON arrays in a string
attribute (GraphML has no list type). XML 1.0 cannot carry most control characters: they become U+FFFD
(counted in the summary); carriage returns are written as ``&#13;`` so parsers keep them.
"""

from __future__ import annotations

import json
import re
from typing import Any, TextIO

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

NODE_PREFIX = {"Entity": "entity", "Chunk": "chunk", "Document": "document"}
_GRAPHML_TYPE = {"string": "string", "string[]": "string", "long": "long", "double": "double", "boolean": "boolean"}
# Everything XML 1.0 does not allow in a document (and lone surrogates, which UTF-8 cannot encode).
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_TEXT_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#13;"})
_ATTR_ESCAPES = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\r": "&#13;", "\n": "&#10;", "\t": "&#9;"}
)


class _Xml:
    def __init__(self) -> None:
        self.replaced = 0

    def clean(self, value: str) -> str:
        value, n = _NOT_XML.subn("\ufffd", value)
        self.replaced += n
        return value

    def text(self, value: str) -> str:
        return self.clean(value).translate(_TEXT_ESCAPES)

    def attr(self, value: str) -> str:
        return self.clean(value).translate(_ATTR_ESCAPES)


def _value_text(value: Any, typ: str) -> str | None:
    if value is None:
        return None
    if typ == "string[]":
        return json.dumps(list(value), ensure_ascii=False)
    if typ == "boolean":
        return "true" if value else "false"
    return str(value)


def _key_declarations(out: TextIO) -> tuple[dict[str, str], dict[str, str]]:
    node_keys: dict[str, str] = {"kind": "string", "label": "string"}
    for kind in NODE_KINDS:
        for name, typ in PROPERTIES[kind]:
            node_keys.setdefault(name, _GRAPHML_TYPE[typ])
    edge_keys: dict[str, str] = {"label": "string"}
    for kind in EDGE_KINDS:
        for name, typ in PROPERTIES[kind]:
            edge_keys.setdefault(name, _GRAPHML_TYPE[typ])
    for name, typ in node_keys.items():
        out.write(f'  <key id="n_{name}" for="node" attr.name="{name}" attr.type="{typ}"/>\n')
    for name, typ in edge_keys.items():
        out.write(f'  <key id="e_{name}" for="edge" attr.name="{name}" attr.type="{typ}"/>\n')
    return node_keys, edge_keys


def node_id(kind: str, key: str) -> str:
    return f"{NODE_PREFIX[kind]}:{key}"


def _label(kind: str, row: dict[str, Any]) -> str:
    if kind == "Entity":
        return row["name"]
    if kind == "Document":
        return row["title"] or row["source_id"] or row["id"]
    return row["id"]


def _property_data(xml: _Xml, prefix: str, kind: str, row: dict[str, Any]) -> str:
    """The ``<data>`` elements of the row's properties that have a value (``prefix``: ``n`` nodes, ``e`` edges)."""
    parts = []
    for name, typ in PROPERTIES[kind]:
        text = _value_text(row[name], typ)
        if text is not None:
            parts.append(f'<data key="{prefix}_{name}">{xml.text(text)}</data>')
    return "".join(parts)


def write_graphml(pages: Pages, output: str, counter: StageCounter) -> ExportSummary:
    xml = _Xml()
    counts: dict[str, int] = {}
    with open(output, "w", encoding="utf-8", newline="\n") as out:
        out.write(
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<graphml xmlns="http://graphml.graphdrawing.org/xmlns"'
            ' xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"'
            ' xsi:schemaLocation="http://graphml.graphdrawing.org/xmlns'
            ' http://graphml.graphdrawing.org/xmlns/1.0/graphml.xsd">\n'
        )
        _key_declarations(out)
        out.write('  <graph id="hxd2" edgedefault="directed">\n')
        for kind in NODE_KINDS:
            for rows in counted_pages(pages, kind, counts, counter):
                out.write(
                    "".join(
                        f'    <node id="{xml.attr(node_id(kind, row[ID_PROPERTY[kind]]))}">'
                        f'<data key="n_kind">{kind}</data>'
                        f'<data key="n_label">{xml.text(_label(kind, row))}</data>'
                        f"{_property_data(xml, 'n', kind, row)}</node>\n"
                        for row in rows
                    )
                )
        for kind in EDGE_KINDS:
            start, end, start_kind, end_kind = ENDPOINTS[kind]
            for rows in counted_pages(pages, kind, counts, counter):
                out.write(
                    "".join(
                        f'    <edge source="{xml.attr(node_id(start_kind, row[start]))}"'
                        f' target="{xml.attr(node_id(end_kind, row[end]))}">'
                        f'<data key="e_label">{kind}</data>'
                        f"{_property_data(xml, 'e', kind, row)}</edge>\n"
                        for row in rows
                    )
                )
        out.write("  </graph>\n</graphml>\n")
    return ExportSummary(
        format="graphml", output=output, files=[output], counts=counts, replaced_characters=xml.replaced
    )
