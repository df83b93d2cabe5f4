"""Rerankers: a cross-encoder scores (question, passage) pairs to reorder the top chunk candidates.

``base`` holds the protocol; backends beside it (``flag_reranker``: FlagEmbedding's ``FlagReranker``, imported
lazily; ``overlap``: deterministic and model-free). :func:`hxd2_ray.wiring.build_reranker` picks one from config.
"""
