"""Replicas the cluster cannot place, said while ``hxd2 serve`` runs (issue 35: "an upscale that cannot be placed
is said once in the serve log and shown in /metrics").

When the autoscaler decides an upscale that the nodes' free resources cannot hold, Serve keeps the new replica
starting, and says so only after 30 s, in its controller's log. ``hxd2 serve`` polls the application's status
every few seconds: a replica still starting after ``after_s`` while the cluster's free resources cannot hold one
replica of its deployment (or that Serve already reports as not scheduled) counts as unplaced. Each episode is said
once in the serve log and on the terminal (and its end once), and the count is the gauge
``hxd2_serve_replicas_unplaced{deployment}`` on Ray's metrics endpoint (the /metrics Prometheus scrapes), 0 when
every replica is placed.

The polls run on a thread of their own (:func:`wait_until_stopped`): a poll is a call into Ray that blocks while
the GCS is gone, and a stop signal sent to the whole process group stops the GCS with ``hxd2 serve``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

log = logging.getLogger("hxd2.serve")

GAUGE = "hxd2_serve_replicas_unplaced"
POLL_S = 5.0
# How long a replica may be starting before a lack of resources is the reason given (an actor takes a moment to
# start even where it fits).
AFTER_S = 10.0
_NOT_SCHEDULED = re.compile(r"has (\d+) replicas? that have taken more than \d+s to be scheduled")


@dataclass(frozen=True)
class Unplaced:
    """One deployment's replicas that cannot be placed now."""

    deployment: str
    replicas: int
    needs: dict[str, float]
    free: dict[str, float]

    @property
    def line(self) -> str:
        need = ", ".join(f"{k} {v:g}" for k, v in sorted(self.needs.items())) or "its resources"
        free = ", ".join(f"{k} {self.free.get(k, 0.0):g}" for k in sorted(self.needs)) or "?"
        return (
            f"{self.deployment}: {self.replicas} replica(s) cannot be placed (each needs {need}; free: {free}); "
            "add nodes, or lower its share or its max_replicas (configs/serve.yaml)"
        )


def replica_needs(options: Mapping[str, Any]) -> dict[str, float]:
    """What one replica asks of a node, in Ray's resource names, from its ``ray_actor_options``."""
    actor = options.get("ray_actor_options") or {}
    needs = {"CPU": float(actor.get("num_cpus", 0) or 0), "GPU": float(actor.get("num_gpus", 0) or 0)}
    if actor.get("memory"):
        needs["memory"] = float(actor["memory"])
    needs.update({str(k): float(v) for k, v in (actor.get("resources") or {}).items()})
    return {k: v for k, v in needs.items() if v > 0}


def _fits(needs: Mapping[str, float], free: Mapping[str, float]) -> bool:
    return all(free.get(name, 0.0) + 1e-9 >= amount for name, amount in needs.items())


def _state_count(replica_states: Mapping[Any, int], name: str) -> int:
    return sum(int(n) for state, n in replica_states.items() if str(getattr(state, "value", state)) == name)


class PlacementWatch:
    """Polled by ``hxd2 serve``'s wait loop: says each unplaced episode once and keeps the gauge current."""

    def __init__(
        self,
        app_name: str,
        deployment_options: Mapping[str, Mapping[str, Any]],
        say: Callable[[str], None],
        after_s: float = AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.app_name = app_name
        self.options = deployment_options
        self.say = say
        self.after_s = after_s
        self.clock = clock
        self._starting_since: dict[str, float] = {}
        self._said: dict[str, Unplaced] = {}
        self._gauge: Any = None
        self._gauge_failed = False

    def unplaced(self, deployments: Mapping[str, Any], free: Mapping[str, float]) -> list[Unplaced]:
        """The deployments with replicas that cannot be placed, from a ``serve.status()`` application's
        deployments and the cluster's free resources."""
        now = self.clock()
        out = []
        for name, status in sorted(deployments.items()):
            starting = _state_count(getattr(status, "replica_states", {}) or {}, "STARTING")
            if not starting:
                self._starting_since.pop(name, None)
                continue
            since = self._starting_since.setdefault(name, now)
            reported = _NOT_SCHEDULED.search(getattr(status, "message", "") or "")
            needs = replica_needs(self.options.get(name, {}))
            lacking = now - since >= self.after_s and bool(needs) and not _fits(needs, free)
            if reported or lacking:
                count = min(starting, int(reported.group(1))) if reported else starting
                out.append(Unplaced(name, count, needs, {k: float(free.get(k, 0.0)) for k in needs}))
        return out

    def poll(self) -> list[Unplaced]:
        """One look at the running application; what is unplaced now."""
        import ray
        from ray import serve

        app = serve.status().applications.get(self.app_name)
        found = self.unplaced(app.deployments if app else {}, ray.available_resources())
        self.record(found)
        return found

    def record(self, found: list[Unplaced]) -> None:
        """Says what started or ended since the last poll, and sets the gauge for every deployment."""
        now = {u.deployment: u for u in found}
        for name, unplaced in now.items():
            if name not in self._said:
                log.warning("upscale cannot be placed: %s", unplaced.line)
                self.say(f"warning: an upscale cannot be placed: {unplaced.line}")
        for name in set(self._said) - set(now):
            log.info("%s: every replica is placed now", name)
            self.say(f"{name}: every replica is placed now")
        self._said = now
        gauge = self._metric()
        if gauge is not None:
            for name in self.options:
                gauge.set(float(now[name].replicas if name in now else 0), tags={"deployment": name})

    def _metric(self) -> Any:
        if self._gauge is None and not self._gauge_failed:
            try:
                from ray.util.metrics import Gauge

                self._gauge = Gauge(
                    GAUGE,
                    description="Serve replicas started but not placed: the cluster's free resources cannot hold "
                    "them (hxd2 serve's placement watch).",
                    tag_keys=("deployment",),
                )
            except Exception as exc:  # noqa: BLE001 - outside a Ray driver (a unit test): the lines are said anyway
                log.warning("the unplaced-replica gauge is not exported (%s: %s)", type(exc).__name__, exc)
                self._gauge_failed = True
        return self._gauge


def wait_until_stopped(stopped: Callable[[], bool], poll: Callable[[], None], every_s: float = POLL_S) -> None:
    """Wait in the calling (main) thread until ``stopped()``, with ``poll`` run every ``every_s`` on a daemon thread.

    Python runs a signal handler only between the main thread's bytecodes. With the poll in the main thread, a stop
    signal to the whole process group arrived while a poll waited on the GCS the same signal had stopped: the
    handler never ran, and Ray's core worker ended the process 60 s later, without its teardown, leaving every Ray
    and vLLM process it had started running (seen in CI)."""
    halt = threading.Event()

    def polls() -> None:
        while not halt.wait(every_s):
            poll()

    threading.Thread(target=polls, name="hxd2-placement-watch", daemon=True).start()
    try:
        while not stopped():
            time.sleep(0.2)
    finally:
        halt.set()
