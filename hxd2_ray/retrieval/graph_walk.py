"""The graph-walk part of the query flow: a learned retrieval policy (GraphFlow) walks the graph from the entities
the question names and returns ranked targets with the path that reached each.

Behind the :class:`~hxd2_ray.retrieval.parts.GraphRetriever` seam (the GraphFlow retriever in one process, an
adapter over the GraphFlow deployment in Serve). Used on its own (mode ``graphflow``: the ranked entities are the
answer, no LLM needed; a passage policy's chunks are the references) and as a step of the multi-stage flow
between the logic form and dual-level retrieval (``multistage.graph_walk``): its paths are the evidence the
verifier checks and the answer is generated from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from hxd2_ray.graph.base import GraphStore, unique_in_order
from hxd2_ray.retrieval.parts import GraphRetriever
from hxd2_ray.retrieval.results import ContextChunk, Reference, references_of
from hxd2_ray.retrieval.run_trace import RunTrace


@dataclass(frozen=True)
class WalkEvidence:
    """The targets of a walk as evidence text (what the verifier checks and the answer prompt carries)."""

    question: str
    targets: tuple[Any, ...]

    def format(self) -> str:
        lines = ["## Candidate answers found by walking the knowledge graph (most probable first)"]
        for i, target in enumerate(self.targets, 1):
            path = " ; ".join(f"{s.source} --{s.relation}--> {s.target}" for s in target.path) or "(start node)"
            lines.append(f"{i}. {target.name}  (probability {target.score:.3f})\n   path: {path}")
        return "\n".join(lines)


@dataclass(frozen=True)
class WalkOutcome:
    result: Any  # the retriever's result (targets, starts, reason, to_dict())
    failure: str  # "" when there are targets

    @property
    def entity_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.result.targets if t.kind == "entity")

    @property
    def chunk_ids(self) -> tuple[str, ...]:
        return tuple(t.key for t in self.result.targets if t.kind == "chunk")

    def evidence(self, max_targets: int) -> WalkEvidence:
        return WalkEvidence(self.result.question, tuple(self.result.targets[:max_targets]))


class GraphWalkStep:
    """Runs the retriever for the flow, records it in the trace, and turns its chunks into references."""

    def __init__(self, retriever: GraphRetriever, graph: GraphStore, *, evidence_targets: int = 5):
        self.retriever = retriever
        self.graph = graph
        self.evidence_targets = evidence_targets

    def run(self, trace: RunTrace, question: str) -> WalkOutcome:
        """Never raises: a failure of the retriever is an outcome with its reason (the flow moves on)."""
        try:
            with trace.timed("graph_walk"):
                result = self.retriever.retrieve(question, topic=trace.topic)
        except Exception as exc:  # noqa: BLE001 - a failed walk is a reason to move on, not a failed query
            failure = f"exception: {type(exc).__name__}: {exc}"
            trace["graphflow"] = {"error": failure}
            return WalkOutcome(_Empty(question, failure), failure)
        trace["graphflow"] = result.to_dict()
        failure = "" if result.targets else (result.reason or "the walk reached nothing")
        return WalkOutcome(result, failure)

    def references(self, chunk_ids: Sequence[str]) -> tuple[Reference, ...]:
        """Documents of the chunks the walk reached, in its ranking."""
        ids = unique_in_order(chunk_ids)
        if not ids:
            return ()
        rows = {c["id"]: c for c in self.graph.get_chunks(ids)}
        chunks = [ContextChunk.from_row(c) for cid in ids if (c := rows.get(cid)) is not None]
        return references_of(chunks)


@dataclass(frozen=True)
class _Empty:
    """The result of a walk that failed before it produced one."""

    question: str
    reason: str
    targets: tuple[Any, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "targets": [], "reason": self.reason}
