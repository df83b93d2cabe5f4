"""The embedding seam: texts in, one L2-normalised float32 row per text out, so inner product is cosine similarity.

Where things are: :mod:`base` holds the :class:`Embedder` protocol; the backends beside it are :mod:`flag_model`
(FlagEmbedding's ``FlagModel`` over an encoder-only model folder) and :mod:`hashing` (deterministic feature hashing,
no model: for tests and the scripted pipeline); :mod:`cached` wraps an embedder to remember its last texts' vectors,
so one query's steps embed each text once. :func:`hxd2_ray.wiring.build_embedder` picks a backend from config.
torch, transformers and FlagEmbedding are imported by :mod:`flag_model` alone, inside the class; no Ray here.
"""
