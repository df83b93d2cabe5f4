"""From extracted tables to the index's graph edges and embedded texts: Ray-free, shared by the stages and the
indexer.

Where things are: :mod:`incremental` re-merges only the entities and relations a change of the corpus touches
(with the full merge's functions, :mod:`hxd2_ray.extraction.merge`); :mod:`synonyms` joins entities whose names
embed alike (SYNONYM edges); :mod:`title_mentions` finds chunks that name another document's title (NAMES_TITLE
edges); :mod:`embedding_texts` gives the text each vector family embeds and the key a vector is stored under.
"""
