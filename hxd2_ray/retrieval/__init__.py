"""Query side: open an index and answer over it. No Ray here.

The flow of every mode is :class:`~hxd2_ray.retrieval.flow.QueryFlow`, built by
:func:`hxd2_ray.wiring.build_pipeline`; its dual-level part is :class:`~hxd2_ray.retrieval.pipeline.QueryPipeline`
and its other parts sit behind the seams of :mod:`hxd2_ray.retrieval.parts`. Importing this package loads neither
Kùzu nor Faiss; :func:`open_index` does, when it opens an index.
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
