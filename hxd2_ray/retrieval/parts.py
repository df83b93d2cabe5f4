"""The seams between the query flow and its parts: planner, plan executor, verifier, graph retriever.

The flow (:class:`~hxd2_ray.retrieval.flow.QueryFlow`) only ever calls these protocols. In one process they are
the library objects themselves (:class:`~hxd2_ray.logic.LogicFormPlanner`, :class:`~hxd2_ray.logic.LogicFormExecutor`,
:class:`~hxd2_ray.logic.EvidenceVerifier`, a GraphFlow retriever), built by :func:`hxd2_ray.wiring.build_parts`;
in Ray Serve they are adapters over the handles of the Planner, PlanExecutor, Verifier and GraphFlow deployments
(``serve/handles.py``), whose replicas hold the same library objects built by the same functions. So the
orchestration is one object in both places, and only where a part runs differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

if TYPE_CHECKING:
    from hxd2_ray.logic import LogicFormEvidence, Plan, PlanResult, Verdict


class Planner(Protocol):
    def plan(self, question: str, *, language: str | None = None, relations: Sequence[str] = ()) -> "PlanResult":
        """A validated plan (or the reason there is none); never raises for a bad LLM reply."""
        ...


class PlanExecutor(Protocol):
    def execute(self, plan: "Plan", question: str = "") -> "LogicFormEvidence":
        """Run a validated plan over the index's graph; failures are recorded in the evidence, not raised."""
        ...


class Verifier(Protocol):
    @property
    def mode(self) -> str:
        """ "pre": question + evidence; "post": question + evidence + answer."""
        ...

    def verify(
        self, question: str, evidence: Any, answer: str | None = None, *, language: str | None = None
    ) -> "Verdict":
        """Whether the evidence supports answering (pre) or the answer (post); an unclear reply is no."""
        ...


class GraphRetriever(Protocol):
    """A learned or rule-based walk over the graph that returns ranked targets with their paths (GraphFlow)."""

    def retrieve(self, question: str, topic: str | None = None) -> Any:
        """``topic``: the question's topic entity when the caller knows it (the walk starts there).

        A result with ``targets`` (ranked, each with ``key``, ``name``, ``kind``, ``score``, ``paths``),
        ``reason`` (non-empty when nothing could be retrieved) and ``to_dict()``."""
        ...


@dataclass(frozen=True)
class FlowParts:
    """What the flow delegates; a part that is None makes the modes needing it unavailable."""

    planner: Planner | None = None
    executor: PlanExecutor | None = None
    verifiers: Mapping[str, Verifier] = field(default_factory=dict)  # verifier mode -> verifier
    graph_retriever: GraphRetriever | None = None
