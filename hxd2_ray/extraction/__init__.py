"""From chunks to entities and relations: loop-NER with an LLM, checks on what it returns, and the global merge.

Where things are: :mod:`extractor` runs loop-NER over a batch of chunks (extract, then gleaning and judge rounds,
one ``llm.complete`` call per round); :mod:`render` turns chunks and merged descriptions into its LLM requests, from
the versioned prompts of :mod:`prompts` (``prompts/extraction_<version>.yaml``, hashed into the index fingerprint);
:mod:`parse` reads entity and relation records out of the replies and never raises on model text; :mod:`grounding`
keeps only the names and relations a chunk's text supports. :mod:`merge` is the global merge: every mention of an
entity (or of an unordered entity pair) across the corpus becomes one merged row, deterministically. :mod:`names`
finds the entity names a question spells out (read at query time by the ``ppr`` ranking and the refusal gate).
No Ray here, and no concrete backend: the LLM is reached through its seam.
"""
