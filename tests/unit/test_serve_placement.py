"""The placement watch of ``hxd2 serve`` (issue 35): a replica the cluster cannot place is said once, its end
once, and counted per deployment; a replica that is merely starting, or that fits, is not."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jobs.serve_placement import PlacementWatch, replica_needs


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Status:
    replica_states: dict[str, int] = field(default_factory=dict)
    message: str = ""


OPTIONS: dict[str, Any] = {
    "Retriever": {"ray_actor_options": {"num_cpus": 0.25}},
    "LLM": {"ray_actor_options": {"num_cpus": 1, "num_gpus": 1, "resources": {"accelerator_type:H100": 0.001}}},
}


def _watch(clock: Clock, said: list[str]) -> PlacementWatch:
    return PlacementWatch("hxd2", OPTIONS, said.append, after_s=10, clock=clock)


def test_a_replica_starting_longer_than_the_grace_where_it_does_not_fit_is_unplaced():
    clock, said = Clock(), []
    watch = _watch(clock, said)
    deployments = {"Retriever": Status({"RUNNING": 1, "STARTING": 1})}
    assert watch.unplaced(deployments, {"CPU": 0.2}) == []  # just started: actors take a moment
    clock.now = 11
    (found,) = watch.unplaced(deployments, {"CPU": 0.2})
    assert found.deployment == "Retriever" and found.replicas == 1
    assert "needs CPU 0.25; free: CPU 0.2" in found.line
    assert watch.unplaced(deployments, {"CPU": 1.0}) == []  # it fits: only slow


def test_serves_own_report_counts_at_once_and_the_episode_is_said_once():
    clock, said = Clock(), []
    watch = _watch(clock, said)
    stuck = Status(
        {"STARTING": 2},
        "Deployment 'LLM' in application 'hxd2' has 2 replicas that have taken more than 30s to be scheduled.",
    )
    for _ in range(3):
        watch.record(watch.unplaced({"LLM": stuck}, {"CPU": 4}))
    assert len(said) == 1 and said[0].startswith("warning: an upscale cannot be placed: LLM: 2 replica(s)")
    assert "GPU 1" in said[0] and "accelerator_type:H100" in said[0]
    watch.record(watch.unplaced({"LLM": Status({"RUNNING": 2})}, {"CPU": 4}))
    assert said[-1] == "LLM: every replica is placed now" and len(said) == 2


def test_what_a_replica_needs_in_rays_resource_names():
    assert replica_needs({}) == {}
    assert replica_needs({"ray_actor_options": {"num_cpus": 0.1, "memory": 2**30, "resources": {"ssd": 1}}}) == {
        "CPU": 0.1,
        "memory": 2**30,
        "ssd": 1.0,
    }
