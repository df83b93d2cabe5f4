"""Section ``retrieval``: one model whose fields come from one file per concern, under the same flat YAML keys
(``retrieval.top_k_entities``, ``retrieval.ppr_damping``, ...).

Where things are: :class:`RetrievalConfig` is defined here, the union of :mod:`matching` (keywords, vector and name
matches of entities, relations and chunks, and the 1-hop neighbourhood kept around them), :mod:`ranking` (the chunk
ranking: mention order, rank fusion or personalized PageRank, then the reranker's share), :mod:`budgets` (the token
budgets of the context tables, the question and the keyword and answer completions) and :mod:`serving` (how a query
process holds an index: caches, threads, the resident graph, checksums).
"""

from __future__ import annotations

from hxd2_ray.config.retrieval.budgets import RetrievalBudgets
from hxd2_ray.config.retrieval.matching import RetrievalMatching
from hxd2_ray.config.retrieval.ranking import RetrievalRanking
from hxd2_ray.config.retrieval.serving import RetrievalServing

__all__ = ["RetrievalBudgets", "RetrievalConfig", "RetrievalMatching", "RetrievalRanking", "RetrievalServing"]


class RetrievalConfig(RetrievalServing, RetrievalBudgets, RetrievalRanking, RetrievalMatching):
    """Query-time settings: dual-level retrieval, context budgets and answer generation (not part of the index).

    Its fields are grouped by concern, one model each: matching, ranking, budgets, serving."""
