"""CSV files for Neo4j's bulk importer (``neo4j-admin database import full``), with its header conventions.

One file per node and relationship kind in the output folder, plus ``import.sh`` with the command that loads
them into a new database. Headers: ``key:ID(Entity)``, ``id:ID(Chunk)``, ``id:ID(Document)`` (three ID spaces,
so a chunk id and an entity key never collide), typed properties (``mention_count:long``, ``weight:double``,
``name_truncated:boolean``, ``keywords:string[]``), ``:LABEL``; relationships ``:START_ID(...)``,
``:END_ID(...)``, ``:TYPE``. Fields are RFC 4180 (quotes doubled, text fields quoted, newlines inside quotes:
the import needs ``--multiline-fields=true``). Array items are joined by U+001F (``--array-delimiter=U+001F``),
a character no text should hold; one that does, and any NUL, is replaced by U+FFFD and counted.
"""

from __future__ import annotations

import csv
import os
import shlex
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

ARRAY_DELIMITER = "\x1f"
FILE_NAMES = {
    "Document": "documents.csv",
    "Chunk": "chunks.csv",
    "Entity": "entities.csv",
    "RELATED": "related.csv",
    "MENTIONS": "mentions.csv",
    "PART_OF": "part_of.csv",
}
IMPORT_SCRIPT = "import.sh"


class _Cells:
    def __init__(self) -> None:
        self.replaced = 0

    def text(self, value: str) -> str:
        if "\x00" in value or ARRAY_DELIMITER in value:
            self.replaced += value.count("\x00") + value.count(ARRAY_DELIMITER)
            value = value.replace("\x00", "\ufffd").replace(ARRAY_DELIMITER, "\ufffd")
        return value

    def cell(self, value: Any, typ: str) -> Any:
        if value is None:
            return ""
        if typ == "string[]":
            return ARRAY_DELIMITER.join(self.text(str(v)) for v in value)
        if typ == "boolean":
            return "true" if value else "false"
        if typ in ("long", "double"):
            return value  # unquoted
        return self.text(str(value))


def node_header(kind: str) -> list[str]:
    cols = []
    for name, typ in PROPERTIES[kind]:
        if name == ID_PROPERTY[kind]:
            cols.append(f"{name}:ID({kind})")
        else:
            cols.append(name if typ == "string" else f"{name}:{typ}")
    return [*cols, ":LABEL"]


def edge_header(kind: str) -> list[str]:
    _start, _end, start_kind, end_kind = ENDPOINTS[kind]
    props = [name if typ == "string" else f"{name}:{typ}" for name, typ in PROPERTIES[kind]]
    return [f":START_ID({start_kind})", f":END_ID({end_kind})", *props, ":TYPE"]


def import_command(database: str = "neo4j") -> list[str]:
    args = ["neo4j-admin", "database", "import", "full"]
    args += [f"--nodes={FILE_NAMES[k]}" for k in NODE_KINDS]
    args += [f"--relationships={FILE_NAMES[k]}" for k in EDGE_KINDS]
    args += ["--array-delimiter=U+001F", "--multiline-fields=true", database]
    return args


def write_neo4j_csv(pages: Pages, output: str, counter: StageCounter) -> ExportSummary:
    os.makedirs(output, exist_ok=True)
    cells = _Cells()
    counts: dict[str, int] = {}
    files = []
    for kind in (*NODE_KINDS, *EDGE_KINDS):
        path = os.path.join(output, FILE_NAMES[kind])
        files.append(path)
        with open(path, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
            if kind in NODE_KINDS:
                writer.writerow(node_header(kind))
            else:
                writer.writerow(edge_header(kind))
            for rows in counted_pages(pages, kind, counts, counter):
                if kind in NODE_KINDS:
                    writer.writerows([*(cells.cell(r[n], t) for n, t in PROPERTIES[kind]), kind] for r in rows)
                else:
                    start, end, _sk, _ek = ENDPOINTS[kind]
                    writer.writerows(
                        [
                            cells.text(r[start]),
                            cells.text(r[end]),
                            *(cells.cell(r[n], t) for n, t in PROPERTIES[kind]),
                            kind,
                        ]
                        for r in rows
                    )
    script = os.path.join(output, IMPORT_SCRIPT)
    with open(script, "w", encoding="utf-8") as fh:
        fh.write(
            "#!/bin/sh\n# Load these files into a new Neo4j database (stop the database first; see the Neo4j "
            'operations manual, \'neo4j-admin database import\').\nset -e\ncd "$(dirname "$0")"\n'
            + " ".join(shlex.quote(a) for a in import_command())
            + "\n"
        )
    os.chmod(script, 0o755)
    files.append(script)
    return ExportSummary(
        format="csv",
        output=output,
        files=files,
        counts=counts,
        replaced_characters=cells.replaced,
        notes=[f"load with: {' '.join(import_command())} (see {IMPORT_SCRIPT})"],
    )
