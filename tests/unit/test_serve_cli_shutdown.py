"""`hxd2 serve`'s shutdown: bounded, so a stop signal that also stopped Ray's own processes still ends the
process cleanly instead of Ray's core worker aborting it a minute later."""

from __future__ import annotations

import threading

import pytest

from jobs.serve_cli import shut_down_within


def test_shutdown_gives_up_when_the_teardown_blocks_and_not_otherwise():
    gave_up = threading.Event()
    # a teardown blocked (as on a GCS stopped by the same signal) until the watchdog gives up
    shut_down_within(lambda: gave_up.wait(30), 0.01, gave_up.set)
    assert gave_up.is_set()
    calls: list[str] = []
    shut_down_within(lambda: calls.append("teardown"), 30.0, lambda: calls.append("gave up"))
    assert calls == ["teardown"]  # finished in time: the watchdog is cancelled


def test_ray_start_is_retried_with_growing_waits_then_succeeds():
    from jobs.serve_cli import start_ray_with_retries

    calls, waits, said, shutdowns = [], [], [], []

    def init():
        calls.append(1)
        if len(calls) < 3:
            raise Exception("The current node timed out during startup. This could happen because ...")

    start_ray_with_retries(
        init, lambda: shutdowns.append(1), where="on this machine", sleep=waits.append, log=said.append
    )
    assert len(calls) == 3 and waits == [5.0, 10.0] and len(shutdowns) == 2
    assert all("timed out during startup" in line for line in said) and len(said) == 2


def test_ray_that_never_starts_is_one_clear_error():
    from hxd2_ray.errors import HxdError
    from jobs.serve_cli import start_ray_with_retries

    def init():
        raise Exception(
            "The current node timed out during startup.\nThis could happen because some of the Ray "
            "processes failed to startup."
        )

    with pytest.raises(HxdError) as err:
        start_ray_with_retries(
            init, lambda: None, where="on this machine", attempts=3, sleep=lambda _s: None, log=lambda _line: None
        )
    message = str(err.value)
    assert "\n" not in message and "after 3 tries" in message and "timed out during startup" in message
    assert "--address auto" in message  # what to do


def test_an_upscale_that_cannot_be_placed_is_named_and_the_shipped_config_fits_two_cpus():
    from pathlib import Path

    import yaml

    from jobs.serve_cli import unplaceable_upscales

    opts = {
        "Ingress": {"num_replicas": 1, "ray_actor_options": {"num_cpus": 0.25}},
        "Retriever": {
            "autoscaling_config": {"min_replicas": 1, "max_replicas": 2},
            "ray_actor_options": {"num_cpus": 0.25},
        },
        "LLM": {"autoscaling_config": {"min_replicas": 1, "max_replicas": 1}, "ray_actor_options": {"num_cpus": 1}},
        "Planner": {"autoscaling_config": {"max_replicas": 2}, "ray_actor_options": {"num_cpus": 0.3}},
    }
    lines = unplaceable_upscales(opts, 2.0)
    assert lines and all("max_replicas" in line or "need" in line for line in lines)
    assert any(line.startswith("Planner:") for line in lines)
    assert unplaceable_upscales(opts, 8.0) == []
    shipped = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / "serve.yaml").read_text())
    deployments = {d["name"]: d for d in shipped["applications"][0]["deployments"]}
    assert unplaceable_upscales(deployments, 2.0) == []  # every max_replicas fits a 2-CPU node
    assert deployments["Ingress"].get("num_replicas", 1) >= 2  # a lost front door leaves another


def test_a_stop_is_seen_while_a_placement_poll_is_blocked():
    """A poll waiting on a GCS that the stop signal also stopped must not keep `hxd2 serve` from its teardown: the
    wait returns once stopped, the poll still blocked (in CI, serve sat in such a poll until Ray's core worker ended
    it a minute later and left every Ray and vLLM process behind)."""
    from jobs.serve_placement import wait_until_stopped

    stopped, polled, release = threading.Event(), threading.Event(), threading.Event()

    def poll() -> None:
        polled.set()
        release.wait(30)  # as serve.status() on a stopped GCS

    waiting = threading.Thread(target=wait_until_stopped, args=(stopped.is_set, poll, 0.01), daemon=True)
    waiting.start()
    try:
        assert polled.wait(5), "the placement was never polled"
        stopped.set()
        waiting.join(2)
        assert not waiting.is_alive(), "the wait did not end while a poll was blocked"
        assert not release.is_set()
    finally:
        release.set()
