"""Looking at an index's graph: pictures of a part of it (PNG, pannable HTML) and the statistics a user checks
before trusting it (counts, degrees, types, components, quarantine and extraction failures).

Where things are: :mod:`subgraph` picks the part of a graph a picture can hold (an entity's neighbourhood, or around
the most connected entity); :mod:`draw` draws it as a PNG (matplotlib, a networkx layout) and :mod:`html_view` as one
self-contained HTML page to pan and zoom; :mod:`stats` computes the statistics, reading the graph in pages. Used by
``hxd2 graph`` and the web UI's index views; the caller hands in the graph store, so nothing here imports a graph
engine or Ray.
"""
