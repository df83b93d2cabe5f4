"""Query side: open an index, dual-level retrieval, budgeted context, grounded (streaming) answers. No Ray here.

Importing this package loads neither Kùzu nor Faiss; :func:`open_index` does, when it opens an index.
"""

from hxd2_ray.retrieval.index import OpenIndex, open_index
from hxd2_ray.retrieval.pipeline import QueryPipeline
from hxd2_ray.retrieval.results import (
    Answer,
    AnswerEvent,
    EmptyQuestionError,
    Keywords,
    Reference,
    RetrievalResult,
)

__all__ = [
    "Answer",
    "AnswerEvent",
    "EmptyQuestionError",
    "Keywords",
    "OpenIndex",
    "QueryPipeline",
    "Reference",
    "RetrievalResult",
    "open_index",
]
