"""A Ctrl-C that something swallowed still ends the command, at the next stage (jobs/interrupts.py).

Seen in CI's phase 2: a SIGINT during ``hxd2 index``'s ingest, on Ray's side of the driver, that the build never
noticed. Here a real SIGINT reaches this process while a stand-in for that path swallows its KeyboardInterrupt;
the next stage's start raises it again, and a command whose interrupt got through is not stopped twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from jobs import interrupts, progress


@pytest.fixture
def handler() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGINT)
    interrupts.forget()
    interrupts.install()
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        interrupts.forget()


def _swallowing_wait() -> None:
    """What a library's wait that drops the interruption does: it catches the KeyboardInterrupt and goes on."""
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1.0)  # the handler runs here, in the main thread
    except KeyboardInterrupt:
        pass


def test_a_swallowed_interrupt_is_raised_when_the_next_stage_begins(handler):
    board = progress.ProgressBoard()
    board.begin("ingest")
    _swallowing_wait()
    board.end("ingest")  # a stage's clean-up is never cut short
    assert interrupts.received()
    with pytest.raises(KeyboardInterrupt):
        board.begin("extract")
    assert "extract" not in board.stages


def test_without_an_interrupt_stages_begin(handler):
    board = progress.ProgressBoard()
    board.begin("ingest")
    board.end("ingest")
    board.begin("extract")
    assert not interrupts.received() and "extract" in board.stages


def test_a_command_interrupted_while_it_ran_exits_130_in_one_line(tmp_path):
    """Through the real entry point: a command whose work swallows the KeyboardInterrupt of a real SIGINT, then
    begins a stage, ends with jobs.cli's one line and status 130."""
    script = tmp_path / "swallowed.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, signal, sys, time
            from jobs import cli, progress

            def main(argv):
                board = progress.ProgressBoard()
                board.begin("ingest")
                try:
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(1.0)
                except KeyboardInterrupt:
                    pass  # swallowed on the way, as Ray's wait did
                board.end("ingest")
                board.begin("extract")
                print("the build went on")
                return 0

            sys.modules["fake_command"] = sys.modules[__name__]
            cli.COMMANDS["fake"] = ("fake_command", "a command that swallows an interrupt")
            sys.exit(cli.main(["fake"]))
            """
        ),
        encoding="utf-8",
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 130, done.stderr
    assert "the build went on" not in done.stdout
    assert "hxd2 fake: interrupted" in done.stderr and "Traceback" not in done.stderr
