"""A stage whose actors no alive node of the Ray cluster can host fails after a bounded wait, naming what is missing.

Ray Data restarts a pool's actors and retries their batches without end. When the node an LLM or embedding actor
ran on is lost and it asks for something only that node offered (``ray.stage_resources``, GPUs), the restarted
actor waits for it forever: the job hangs, its progress line frozen. :func:`watch_capacity` adds a Ray Data
execution callback to the stage's datasets; at each step of the stage's scheduling loop it looks (every few
seconds) at the alive nodes' totals, and when none of them holds one actor's needs for ``wait_s`` it raises
:class:`~hxd2_ray.errors.ClusterResourcesError`, which fails the stage: the job ends with one line naming the
resources and how to bring them back, and a rerun once they are back resumes (the batches already persisted are
kept). A node that comes back within ``wait_s`` lets Ray restart the actors there and the stage go on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import ray.data
from ray.data._internal.execution.execution_callback import ExecutionCallback

from hxd2_ray.errors import ClusterResourcesError

CHECK_EVERY_S = 2.0


@dataclass(frozen=True)
class ActorNeeds:
    """What one actor of a stage asks of the node it runs on (Ray resource name -> amount)."""

    stage: str
    resources: dict[str, float]
    wait_s: float

    def wanted(self) -> dict[str, float]:
        return {name: amount for name, amount in self.resources.items() if amount > 0}


def alive_node_totals() -> list[dict[str, float]]:
    """Each alive node's total resources (not what is free: a busy node still hosts the actor later)."""
    return [dict(node.get("Resources") or {}) for node in ray.nodes() if node.get("Alive")]


def fits(totals: dict[str, float], needs: dict[str, float]) -> bool:
    return all(totals.get(name, 0.0) >= amount for name, amount in needs.items())


def missing(nodes: list[dict[str, float]], needs: ActorNeeds) -> str:
    """Why no node fits, in words: what no alive node offers enough of, or that none offers it all together."""
    wanted = needs.wanted()
    most = {name: max((node.get(name, 0.0) for node in nodes), default=0.0) for name in wanted}
    offered = ", ".join(f"{name} {amount:g}" for name, amount in most.items())
    alive = f"{len(nodes)} alive node offers" if len(nodes) == 1 else f"{len(nodes)} alive nodes offer"
    short = ", ".join(f"{name} {amount:g}" for name, amount in wanted.items() if most[name] < amount)
    if short:
        return f"none offers {short} (the {alive} at most {offered})"
    return f"none offers it all together (the {alive} at most {offered})"


def _fix(needs: ActorNeeds) -> str:
    custom = {name: amount for name, amount in needs.wanted().items() if name not in ("CPU", "GPU")}
    if custom:
        start = f"ray start --resources '{json.dumps(custom)}'"
        return f"Start a node that offers them ({start}) or change ray.stage_resources"
    return "Add a node that offers them, or lower the stage's ray.cpus_per_*_actor / ray.gpus_per_*_actor"


class CapacityWatch(ExecutionCallback):  # type: ignore[misc]  # ray is not followed by mypy: the base is Any
    """Fails the stage (raises in Ray Data's scheduling loop) once no alive node could host one of its actors for
    ``needs.wait_s``. :func:`watch_capacity` makes a subclass bound to the stage's needs (Ray Data instantiates
    its callbacks without arguments)."""

    needs: ActorNeeds
    nodes: Callable[[], list[dict[str, float]]] = staticmethod(alive_node_totals)
    clock: Callable[[], float] = staticmethod(time.monotonic)

    def __init__(self) -> None:
        self._checked = float("-inf")
        self._since: float | None = None  # when no node fitted first (None: one fits)

    def on_execution_step(self, executor: Any) -> None:
        self.check()

    def check(self) -> None:
        now = self.clock()
        if now - self._checked < CHECK_EVERY_S:
            return
        self._checked = now
        nodes = self.nodes()
        if any(fits(node, self.needs.wanted()) for node in nodes):
            self._since = None
            return
        if self._since is None:
            self._since = now
        if now - self._since >= self.needs.wait_s:
            wanted = ", ".join(f"{name} {amount:g}" for name, amount in self.needs.wanted().items())
            raise ClusterResourcesError(
                f"{self.needs.stage}: for {self.needs.wait_s:g}s no alive node of the Ray cluster could host the "
                f"stage's actors (each asks for {wanted}): {missing(nodes, self.needs)}; the node that offered "
                f"them was lost, or never joined. {_fix(self.needs)}, then rerun the same command: the batches "
                f"already done are kept (ray.resource_wait_s sets this wait)"
            )


@contextmanager
def watch_capacity(needs: ActorNeeds) -> Iterator[None]:
    """Datasets created inside the block fail once no alive node can host the stage's actors for ``needs.wait_s``
    (``wait_s`` 0: no watch, the stage waits for such a node for ever)."""
    if needs.wait_s <= 0:
        yield
        return
    ctx = ray.data.DataContext.get_current()
    before = list(ctx.custom_execution_callback_classes)
    watch = type(f"CapacityWatch_{needs.stage}", (CapacityWatch,), {"needs": needs})
    ctx.custom_execution_callback_classes = [*before, watch]
    try:
        yield
    finally:
        ctx.custom_execution_callback_classes = before
