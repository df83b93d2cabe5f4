"""Export an index's graph for other tools: GraphML (Gephi, yEd, networkx), Neo4j ``neo4j-admin import`` CSV,
or a Cypher script for a user's own database. Every format streams the graph page by page through
:meth:`KuzuGraphStore.iter_pages`, so memory stays bounded by a page whatever the graph's size.

Where things are: :mod:`export` is the entry point (:func:`export_graph`: one writer over the store's pages);
:mod:`rows` describes the graph's tables as the writers see them (names, property types, endpoints) and pages them;
the writers are :mod:`graphml` (GraphML), :mod:`neo4j_csv` (CSV files and an ``import.sh`` for
``neo4j-admin database import``) and :mod:`cypher` (a Cypher script for one's own Neo4j). The caller hands in the
graph store, so nothing here imports a graph engine or Ray.

The graph as exported: ``Entity`` nodes (key, name, type, description, source_chunk_ids, mention_count,
name_truncated, degree), ``Chunk`` nodes (id, doc_id, order, start, text, header_path, language), ``Document``
nodes (id, source_id, source_path, title, n_chars), ``RELATED`` edges between entities (stored once per
unordered pair, smaller key first: description, keywords, weight, source_chunk_ids, mention_count),
``MENTIONS`` (chunk -> entity) and ``PART_OF`` (chunk -> document).
"""

from __future__ import annotations

from hxd2_ray.graph_export.export import export_graph
from hxd2_ray.graph_export.rows import EXPORT_FORMATS, ExportSummary

__all__ = ["EXPORT_FORMATS", "ExportSummary", "export_graph"]
