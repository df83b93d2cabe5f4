"""An index's content read back for comparisons by content (the crash matrix, the build runners): its graph's
rows and every vector of every family, by key, from the manifest's current generation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

GRAPH_ROWS = {
    "Document": "MATCH (d:Document) RETURN d.id, d.source_id, d.source_path, d.title, d.n_chars",
    "Chunk": "MATCH (c:Chunk) RETURN c.id, c.doc_id, c.ord, c.start, c.text, c.header_path, c.language",
    "Entity": "MATCH (e:Entity) RETURN e.key, e.name, e.type, e.description, e.source_chunk_ids, e.mention_count, "
    "e.name_truncated, e.degree",
    "RELATED": "MATCH (a:Entity)-[r:RELATED]->(b:Entity) RETURN a.key, b.key, r.description, r.keywords, r.weight, "
    "r.source_chunk_ids, r.mention_count",
    "MENTIONS": "MATCH (c:Chunk)-[:MENTIONS]->(e:Entity) RETURN c.id, e.key",
    "PART_OF": "MATCH (c:Chunk)-[:PART_OF]->(d:Document) RETURN c.id, d.id",
}


def generation_files(index: Path) -> Path:
    """The folder of the manifest's current generation (graph and vectors)."""
    generation = json.loads((index / "manifest.json").read_text()).get("generation", "")
    return index / "generations" / generation if generation else index


def graph_rows(index: Path) -> dict[str, list[str]]:
    """Every row of every graph table, sorted."""
    import kuzu

    db = kuzu.Database(str(generation_files(index) / "graph.kuzu"), read_only=True)
    conn = kuzu.Connection(db)
    try:
        return {name: sorted(repr(row) for row in conn.execute(q).get_all()) for name, q in GRAPH_ROWS.items()}
    finally:
        conn.close()
        db.close()


def vector_contents(index: Path) -> dict[str, dict[str, bytes]]:
    """Every vector of every family, by key, read back from the published Faiss shards (either family format: a
    build from before the mapped id maps, too)."""
    from hxd2_ray.index_store.tables import VECTOR_FAMILIES
    from hxd2_ray.vectors.faiss_index import stored_vectors

    families = {}
    for family in VECTOR_FAMILIES:
        content = {key: np.asarray(vector).tobytes() for key, vector in stored_vectors(generation_files(index), family)}
        count = json.loads((generation_files(index) / "vectors" / family / "family.json").read_text())["count"]
        assert len(content) == count, family
        families[family] = content
    return families
