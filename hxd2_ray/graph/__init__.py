"""The graph seam: an index's knowledge graph, stored in an embedded Cypher engine and read by the query side from
flat arrays.

Where things are: :mod:`base` holds the :class:`GraphStore` protocol and the plain rows it returns; :mod:`templates`
names the graph reads a caller may ask for (a caller never holds query text). The store of record is
:mod:`kuzu_store` (one bulk writer and a parameterised reader, on Kùzu or LadybugDB), with its Cypher in
:mod:`kuzu_queries`, its tables' DDL and COPY schemas in :mod:`kuzu_schema`, and the Arrow tables it is bulk-loaded
from in :mod:`kuzu_tables`, prepared from the staging tables whose schemas are in :mod:`schema`; :mod:`engine` picks
the engine (``graph.backend``). The query side's reads: :mod:`read_structures` writes the graph as flat arrays
beside the Kùzu file at index time and maps them when an index opens, :mod:`resident` answers the store's reads from
them, and :mod:`walk_matrix` holds the walk's adjacency as typed CSR arrays for the ``ppr`` ranking. :mod:`engine`
alone imports ``kuzu`` or ``ladybug``; no Ray here.
"""
