"""The watch that fails a stage no alive node can host any more (hxd2_ray.stages.actor_capacity), on a fake cluster
and clock; the real lost node is tests/integration/test_index_node_loss.py."""

from __future__ import annotations

import pytest

from hxd2_ray.errors import ClusterResourcesError
from hxd2_ray.stages.actor_capacity import ActorNeeds, CapacityWatch, watch_capacity

HEAD = {"CPU": 1.0}
PINNED = {"CPU": 2.0, "second_node": 4.0}


def _watch(nodes: list[list[dict[str, float]]], needs: ActorNeeds) -> tuple[CapacityWatch, list[float]]:
    """A watch whose n-th check sees ``nodes[n]`` (the last one thereafter), on a clock the test moves."""
    now = [0.0]
    seen = iter(nodes)
    last: list[dict[str, float]] = []

    def alive() -> list[dict[str, float]]:
        nonlocal last
        last = next(seen, last)
        return last

    cls = type(
        "Watch", (CapacityWatch,), {"needs": needs, "nodes": staticmethod(alive), "clock": staticmethod(lambda: now[0])}
    )
    return cls(), now


def test_a_lost_pinned_node_fails_the_stage_after_the_wait_naming_what_is_missing():
    needs = ActorNeeds("extract", {"CPU": 0.5, "GPU": 0.0, "second_node": 1.0}, wait_s=10)
    watch, now = _watch([[HEAD, PINNED], [HEAD]], needs)
    watch.check()  # the pinned node is there
    for t in (2, 5, 11):  # gone since t=2: not yet 10 s without it
        now[0] = t
        watch.check()
    now[0] = 13.0  # 11 s without it
    with pytest.raises(ClusterResourcesError) as err:
        watch.check()
    message = str(err.value)
    assert message.startswith("extract: for 10s no alive node of the Ray cluster could host the stage's actors")
    assert "(each asks for CPU 0.5, second_node 1)" in message and "GPU" not in message
    assert "none offers second_node 1 (the 1 alive node offers at most CPU 1, second_node 0)" in message
    assert """ray start --resources '{"second_node": 1.0}'""" in message and "\n" not in message


def test_a_node_back_within_the_wait_resets_it_and_checks_are_spaced():
    needs = ActorNeeds("embed", {"CPU": 1.0, "second_node": 1.0}, wait_s=10)
    watch, now = _watch([[HEAD], [HEAD, PINNED], [HEAD]], needs)
    watch.check()
    now[0] = 1.0
    watch.check()  # within CHECK_EVERY_S of the last check: the cluster is not asked
    now[0] = 8.0
    watch.check()  # the node is back: the wait starts again when it goes
    now[0] = 10.0
    watch.check()
    now[0] = 19.0
    watch.check()  # 9 s without it
    now[0] = 21.0
    with pytest.raises(ClusterResourcesError, match="embed: for 10s"):
        watch.check()


def test_resources_each_offered_but_not_together_and_a_zero_wait_adds_no_watch():
    import ray.data

    needs = ActorNeeds("extract", {"CPU": 2.0, "GPU": 1.0}, wait_s=1)
    watch, now = _watch([[{"CPU": 8.0}, {"CPU": 1.0, "GPU": 1.0}]], needs)
    watch.check()
    now[0] = 3.0
    with pytest.raises(ClusterResourcesError, match="none offers it all together .*lower the stage's ray.cpus_per"):
        watch.check()

    ctx = ray.data.DataContext.get_current()
    before = list(ctx.custom_execution_callback_classes)
    with watch_capacity(ActorNeeds("extract", {"CPU": 1.0}, wait_s=0)):
        assert ctx.custom_execution_callback_classes == before
    with watch_capacity(needs):
        (added,) = [cls for cls in ctx.custom_execution_callback_classes if cls not in before]
        assert issubclass(added, CapacityWatch) and added.needs == needs
    assert ctx.custom_execution_callback_classes == before
