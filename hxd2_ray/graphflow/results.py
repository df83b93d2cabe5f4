"""What a GraphFlow walk returns: ranked targets with their evidence paths. Plain data, no torch: a result crosses
Serve's GraphWalker handle and is read in a Retriever replica that never loads a policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hxd2_ray.graphflow.linking import StartNode

__all__ = ["GraphFlowResult", "PathStep", "RankedTarget"]


@dataclass(frozen=True, slots=True)
class PathStep:
    source: str  # name
    relation: str  # "directed by" (out), "<-directed by" (in), "~mentions" (no direction)
    target: str

    def to_dict(self) -> dict[str, str]:
        return {"source": self.source, "relation": self.relation, "target": self.target}


@dataclass(frozen=True, slots=True)
class RankedTarget:
    key: str  # entity key or chunk id
    name: str  # entity name, or the chunk's document title
    kind: str  # entity | chunk
    score: float  # probability mass of the trajectories ending here
    path: tuple[PathStep, ...]  # the most probable trajectory to it (the evidence)
    source_id: str = ""  # chunks: the document's source id

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "kind": self.kind,
            "score": round(self.score, 6),
            "path": [p.to_dict() for p in self.path],
            **({"source_id": self.source_id} if self.source_id else {}),
        }


@dataclass(frozen=True)
class GraphFlowResult:
    question: str
    targets: tuple[RankedTarget, ...]
    starts: tuple[StartNode, ...]
    results: tuple[str, ...] = ()  # terminal key of each finished trajectory, most probable first (duplicates kept)
    reason: str = ""  # why there is nothing (no start node, nothing reached); "" when targets were found
    timings_ms: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.targets)

    def answers(self, k: int | None = None) -> list[str]:
        return [t.name for t in self.targets[:k]]

    def passage_ids(self, k: int | None = None) -> list[str]:
        ids = list(dict.fromkeys(t.source_id for t in self.targets if t.kind == "chunk"))
        return ids[:k] if k is not None else ids

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "targets": [t.to_dict() for t in self.targets],
            "starts": [s.to_dict() for s in self.starts],
            "results": list(self.results),
            "reason": self.reason,
            "timings_ms": {k: round(v, 3) for k, v in self.timings_ms.items()},
        }
