"""The progress board and its renderers, with an injected clock (no wall-clock assertions)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hxd2_ray.progress import CountingLLM
from jobs import console, progress


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rates_eta_and_finished_line():
    clock = FakeClock()
    board = progress.ProgressBoard(clock=clock)
    board.begin("extract", total=64, unit="chunks")
    clock.now += 10
    board.add("extract", done=16, prompt_tokens=9_000, completion_tokens=1_000, llm_calls=32)
    stage = board.stages["extract"]
    assert stage.rate(clock.now) == 1.6
    assert stage.eta(clock.now) == 30.0  # 48 left at 1.6/s
    line = progress.describe(stage, clock.now)
    assert "16/64 chunks 25%" in line and "1.6 chunks/s" in line and "1,000 tok/s" in line
    assert "32 LLM calls" in line and "ETA 0:30" in line
    clock.now += 30
    board.add("extract", done=48, malformed=3, failed=1)
    board.end("extract", "ran on 64 of 64 chunks")
    line = progress.describe(board.stages["extract"], clock.now + 100)  # a finished stage's numbers stay put
    assert "64/64 chunks 100%" in line and "in 0:40" in line and "3 malformed" in line and "1 failed" in line
    assert "ETA" not in line and line.endswith("ran on 64 of 64 chunks")
    board.add("extract", done=5)  # late counts after the end are ignored
    assert board.stages["extract"].done == 64


def test_running_score_and_unknown_total():
    clock = FakeClock()
    board = progress.ProgressBoard(clock=clock)
    board.begin("answer dual", total=None, unit="questions", score=True)
    clock.now += 4
    board.sync("answer dual", {"done": 8, "correct": 2})
    line = progress.describe(board.stages["answer dual"], clock.now)
    assert line.startswith("8 questions") and "2.0 questions/s" in line and "score 0.250" in line
    assert "0:04 elapsed" in line  # no total, no ETA


def test_line_renderer_prints_start_periodic_and_end_lines():
    clock = FakeClock()
    out = io.StringIO()
    board = progress.ProgressBoard(progress.LineRenderer(out, interval_s=10), clock=clock)
    board.begin("embed", total=100, unit="texts")
    for _ in range(25):  # an update every second: one line per 10 s
        clock.now += 1
        board.add("embed", done=4)
    board.end("embed", "ran")
    board.close()
    lines = out.getvalue().splitlines()
    periodic = [x for x in lines if x.startswith("[hxd2] embed: ")]
    assert lines[0] == "[hxd2] embed …"
    assert len(periodic) == 2 and "40/100 texts 40%" in periodic[0] and "80/100 texts" in periodic[1]
    assert any(x.startswith("[hxd2] embed done: 100/100 texts 100%") for x in lines)
    assert lines[-2].split() == ["stage", "items", "time", "rate", "tokens/s", "notes"]
    assert "\x1b" not in out.getvalue()


def test_a_stage_whose_counts_stop_moving_is_reported_once():
    clock = FakeClock()
    board = progress.ProgressBoard(clock=clock)
    board.begin("extract", total=10, unit="chunks")
    board.begin("merge")  # no total: nothing to compare against
    clock.now += 200
    board.add("extract", done=1)
    clock.now += 250
    assert board.stalled(300) == []
    clock.now += 60
    assert [s.name for s in board.stalled(300)] == ["extract"]
    clock.now += 600
    assert board.stalled(300) == []  # once


def test_close_marks_a_stage_left_running_as_stopped():
    board = progress.ProgressBoard(clock=FakeClock())
    board.begin("merge")
    board.close()
    assert board.stages["merge"].status == "stopped"
    assert board.rows()[0]["notes"] == "stopped"


def test_live_renderer_draws_a_stage_when_it_starts_not_at_the_next_tick():
    out = io.StringIO()
    clock = FakeClock()
    # one refresh a minute: what is drawn within the test is drawn by the stage's start itself
    board = progress.ProgressBoard(progress.LiveRenderer(out, refresh_per_second=1 / 60), clock=clock)
    board.begin("read")
    board.end("read", "ran")
    board.begin("embed", total=10, unit="texts")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert re.search(r"embed\s.*━", text)  # its bar, drawn before any progress or tick
    board.end("embed", "ran")
    board.close()


def test_live_renderer_draws_with_terminal_codes_and_leaves_finished_lines():
    out = io.StringIO()
    clock = FakeClock()
    board = progress.ProgressBoard(progress.LiveRenderer(out), clock=clock)
    board.begin("extract", total=4, unit="chunks")
    clock.now += 2
    board.add("extract", done=4)
    board.note("warning: something to act on")
    board.end("extract", "ran")
    board.close()
    raw = out.getvalue()
    assert "\x1b[" in raw
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
    assert "✓ extract  4/4 chunks 100%" in text and "warning: something to act on" in text
    assert "stage" in text and "tokens/s" in text  # the table


def test_counting_llm_reports_calls_and_tokens():
    from hxd2_ray.config import ScriptedLLMConfig
    from hxd2_ray.llm.base import LLMRequest
    from hxd2_ray.llm.scripted import ScriptedLLM

    got: dict[str, float] = {}

    class Tally:
        def add(self, **counts: float) -> None:
            for k, v in counts.items():
                got[k] = got.get(k, 0) + v

    llm = CountingLLM(ScriptedLLM.from_config(ScriptedLLMConfig()), Tally())
    responses = llm.complete(
        [LLMRequest(messages=({"role": "user", "content": f"q{i}"},), max_tokens=8) for i in range(3)]
    )
    assert got == {
        "llm_calls": 3,
        "prompt_tokens": sum(r.prompt_tokens for r in responses),
        "completion_tokens": sum(r.completion_tokens for r in responses),
    }


def test_quiet_console_sends_fd_output_to_the_log_and_project_warnings_to_the_terminal(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("HXD2_PROGRESS", "lines")
    log = tmp_path / "out" / "_logs" / "x.log"
    with console.job_console("index", log) as con:
        os.write(1, b"native stdout noise\n")
        os.write(2, b"native stderr noise\n")
        logging.getLogger("hxd2_ray.something").warning("disk almost full")
        # A library's propagating logger (Ray's own loggers write to fd 2, covered by the os.write above; once an
        # earlier test imported Ray, their handlers hold that test's captured stream, so they are not used here).
        logging.getLogger("some_library.module").warning("ray chatter")
        con.board.begin("ingest", total=2, unit="files")
        con.board.add("ingest", done=2)
        con.board.end("ingest")
    captured = capfd.readouterr()
    shown = captured.out + captured.err
    assert "noise" not in shown and "ray chatter" not in shown
    assert "warning: disk almost full" in shown and "[hxd2] ingest done: 2/2 files" in shown
    assert str(log) in shown  # the log's path, once
    written = log.read_text()
    assert "native stdout noise" in written and "native stderr noise" in written
    assert "ray chatter" in written
    assert progress.current().__class__ is progress.NullBoard  # the board is gone with the console


def test_verbose_console_redirects_nothing(tmp_path, capfd):
    with console.job_console("index", tmp_path / "x.log", verbose=True) as con:
        os.write(2, b"native stderr noise\n")
        assert con.log_path is None
    assert "native stderr noise" in capfd.readouterr().err
    assert not (tmp_path / "x.log").exists()


def test_log_paths():
    assert console.log_path_for("index", "runs/idx", now=0).parent.as_posix() == "runs/idx/_logs"
    beside = console.log_path_for("index-kb", "runs/kb", beside=True, now=0)
    assert beside.parent.name == "_logs" and beside.name.startswith("kb.index-kb-")
    assert console.log_path_for("eval-run", "s3://b/x", now=0).parts[:2] == (".hxd2", "logs")


def test_run_job_prints_the_summary_after_the_console_and_errors_with_the_log(tmp_path, capfd):
    from hxd2_ray.errors import HxdError

    log = tmp_path / "l.log"
    code = console.run_job(lambda: {"a": 1}, command="t", log_path=log, verbose=False, as_json=True, format_text=str)
    out = capfd.readouterr()
    assert code == 0 and out.out.strip() == '{\n  "a": 1\n}'

    def fail() -> dict:
        print("partial output", file=sys.stderr)
        raise HxdError("bad input")

    assert console.run_job(fail, command="t", log_path=log, verbose=False, as_json=False, format_text=str) == 2
    err = capfd.readouterr().err
    assert "error: bad input" in err and f"(the full log: {log})" in err


def test_a_log_folder_that_cannot_be_written_falls_back_to_the_working_folder(tmp_path, monkeypatch):
    from jobs.console import run_job

    monkeypatch.chdir(tmp_path)
    (tmp_path / "output").write_text("a file where the output folder should be")
    unwritable = tmp_path / "output" / "_logs" / "index-delete-1.log"  # its parent cannot be made

    def work() -> dict:
        from hxd2_ray.errors import HxdError

        raise HxdError("cannot write to the output folder output")

    code = run_job(work, command="index delete", log_path=unwritable, verbose=False, as_json=False, format_text=str)
    assert code == 2  # the command's own error, not a traceback about its log
    assert list((tmp_path / ".hxd2" / "logs").glob("index-delete-*.log"))


@pytest.fixture
def full_disk(tmp_path) -> Iterator[Path]:
    """A real 1 MB tmpfs, filled to the last byte (root can mount one; elsewhere the test is skipped)."""
    mount_point = tmp_path / "full"
    mount_point.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        (mount_point / "index" / "_logs").mkdir(parents=True)
        with open(mount_point / "filler", "wb", buffering=0) as fh:
            with contextlib.suppress(OSError):  # ENOSPC: full
                while True:
                    fh.write(b"\0" * 4096)
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_a_full_disk_sends_the_log_elsewhere_and_the_command_still_runs(full_disk, tmp_path, monkeypatch, capfd):
    """Issue 40, item 8: a query on an index whose disk is full failed on its own log file (ENOSPC)."""
    monkeypatch.setenv("HXD2_PROGRESS", "lines")
    monkeypatch.chdir(tmp_path)
    log = full_disk / "index" / "_logs" / "query-1.log"
    with console.job_console("query", log) as con:
        os.write(2, b"engine noise\n")
    err = capfd.readouterr().err
    fallback = list((tmp_path / ".hxd2" / "logs").glob("query-*.log"))
    assert con.log_path is not None and con.log_path.absolute() == fallback[0], err
    assert "engine noise" in fallback[0].read_text()
    assert err.count("its log goes to") == 1 and str(full_disk / "index" / "_logs") in err

    # The free-space check passed over (a disk that fills meanwhile): the first write fails, and the log moves on.
    monkeypatch.setattr(console, "MIN_LOG_FREE_BYTES", 0)
    with console.job_console("query", log) as con:
        pass
    assert con.log_path is not None and con.log_path.absolute().parent == fallback[0].parent
    assert "No space left on device" in capfd.readouterr().err

    # No disk to write any log to: the logs stay on the terminal, and the command goes on.
    monkeypatch.chdir(full_disk)
    monkeypatch.setattr(console, "MIN_LOG_FREE_BYTES", 8 * 1024 * 1024)
    with console.job_console("query", log) as con:
        os.write(2, b"engine noise\n")
    err = capfd.readouterr().err
    assert con.log_path is None and "engine noise" in err and "no log file can be written" in err
