"""Rerankers: a cross-encoder scores (question, passage) pairs to reorder the top chunk candidates.

Where things are: :mod:`base` holds the :class:`Reranker` protocol (one score per pair, comparable within one call
only); the backends beside it are :mod:`flag_reranker` (FlagEmbedding's ``FlagReranker``, imported lazily, model
folders local only) and :mod:`overlap` (deterministic and model-free: the share of the query's words found in the
passage). :func:`hxd2_ray.wiring.build_reranker` picks one from config. torch and FlagEmbedding are imported by
:mod:`flag_reranker` alone; no Ray here.
"""
