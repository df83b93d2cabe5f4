"""`hxd2 serve`'s shutdown: bounded, so a stop signal that also stopped Ray's own processes still ends the
process cleanly instead of Ray's core worker aborting it a minute later."""

from __future__ import annotations

import threading

from jobs.serve_cli import shut_down_within


def test_shutdown_gives_up_when_the_teardown_blocks_and_not_otherwise():
    gave_up = threading.Event()
    # a teardown blocked (as on a GCS stopped by the same signal) until the watchdog gives up
    shut_down_within(lambda: gave_up.wait(30), 0.01, gave_up.set)
    assert gave_up.is_set()
    calls: list[str] = []
    shut_down_within(lambda: calls.append("teardown"), 30.0, lambda: calls.append("gave up"))
    assert calls == ["teardown"]  # finished in time: the watchdog is cancelled
