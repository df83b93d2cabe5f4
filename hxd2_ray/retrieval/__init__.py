"""Query side: open an index and answer over it. No Ray here.

Where things are: opening an index: :mod:`index` (:func:`open_index`: the manifest first, then the graph and the
vector families of its current generation), :mod:`live_index` (an index that follows its published generations, for
long-lived readers), :mod:`query_config` (the config a command on an index runs with). The flow: :mod:`flow`
(:class:`QueryFlow`, every mode of every entry point), :mod:`parts` (the seams to its planner, plan executor,
verifier and graph retriever), :mod:`single_paths` (the paths that answer in one step), :mod:`logic_form` (plan and
execute under a deadline, verify, answer from the evidence), :mod:`graph_walk` (the GraphFlow walk), :mod:`intent`
(intent recognition and the multi-stage pipeline's prompts), :mod:`conversation` (a conversation's last question
rewritten to stand alone), :mod:`refusal` (the refusal gate and how to calibrate its threshold),
:mod:`refusal_calibration` (an index's threshold, calibrated when it is built), :mod:`speculation` (a generator
started before its output is known to be wanted), :mod:`run_trace` (the record of one query), :mod:`results` (what a
query produces), :mod:`question_file` (the ``--questions`` file of ``hxd2 query``). Dual-level retrieval:
:mod:`pipeline` (:class:`QueryPipeline`: keywords, matches, graph context, budgeted prompt, answer), :mod:`keywords`
(the keyword request and its tolerant parser), :mod:`keyword_grounding` (the keywords the question or the index
supports), :mod:`fuzzy` (near-miss entity names), :mod:`lexical` (BM25 over a generation's chunks) and
:mod:`bm25_matrix` (its score matrix, built over arrays), :mod:`ranking` (channel hits into context rows in rank
order), :mod:`ppr` and :mod:`walk_ranking` (the personalized PageRank chunk ranking), :mod:`budget` (token budgets),
:mod:`render` (the context as CSV tables and the answer prompt), :mod:`query_prompts` (the versioned query prompts
under ``prompts/``).

The flow of every mode is :class:`~hxd2_ray.retrieval.flow.QueryFlow`, built by
:func:`hxd2_ray.wiring.build_pipeline`; its dual-level part is :class:`~hxd2_ray.retrieval.pipeline.QueryPipeline`
and its other parts sit behind the seams of :mod:`hxd2_ray.retrieval.parts`. Importing this package loads neither
Kùzu nor Faiss; :func:`open_index` does, when it opens an index. Only :mod:`index` and :mod:`refusal_calibration`
import the concrete graph and vector stores (to open an index's files); everything else reaches backends through
their seams.
"""

from hxd2_ray.retrieval.flow import MODES, RETRIEVAL_ONLY_MODES, ModeUnavailableError, QueryFlow
from hxd2_ray.retrieval.index import OpenIndex, open_index
from hxd2_ray.retrieval.pipeline import QueryPipeline
from hxd2_ray.retrieval.results import (
    Answer,
    EmptyQuestionError,
    Keywords,
    QueryEvent,
    Reference,
    RetrievalResult,
)

__all__ = [
    "MODES",
    "RETRIEVAL_ONLY_MODES",
    "Answer",
    "EmptyQuestionError",
    "Keywords",
    "ModeUnavailableError",
    "OpenIndex",
    "QueryEvent",
    "QueryFlow",
    "QueryPipeline",
    "Reference",
    "RetrievalResult",
    "open_index",
]
