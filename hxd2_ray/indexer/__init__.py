"""The index use cases: build, update, delete and dry-run an index over the stages, load one from triples, and
write an older index's read structures in place. Composed with :mod:`hxd2_ray.wiring`; driven by the CLI and the
index job (``jobs/index.py``, ``jobs/index_update.py``, ``jobs/index_kb.py``, ``jobs/index_reads.py``).

Where things are: :mod:`flow` is an index build (:class:`flow.IndexBuild`: a build from scratch, an update, a
delete or a dry run, one stage after another over a runner); :mod:`steps` runs the stages as the flow needs them
(ingest, extract, merge, summarize, embed); :mod:`publish` writes a generation and commits its manifest;
:mod:`update` applies a change of the corpus to the current generation; :mod:`dry_run` estimates a build's cost
from a sample; :mod:`context` is what one run carries; :mod:`release_change` says what a new release's config
changes. :mod:`query_reads` writes what a generation's readers map (the graph's read structures, the fuzzy name
and title indexes); :mod:`kb_index` builds an index from triples (``hxd2 index-kb``); :mod:`reindex_reads` writes
an older index's read structures in place (``hxd2 index reads``).
"""
