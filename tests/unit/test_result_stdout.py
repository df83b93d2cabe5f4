"""stdout carries the command's result alone, whoever else writes to it and whenever (issue 17, item 11).

Ray prints worker output and the raylet's "Task ... failed ... retried" messages to the driver's stdout from
its own threads, sometimes after the command's work has returned (deduplicated lines are flushed at shutdown);
C libraries write to file descriptor 1 directly. Checked in a fresh interpreter so file descriptors are real.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_late_thread_prints_fd_writes_and_atexit_prints_go_to_stderr():
    code = textwrap.dedent("""
        import atexit, os, sys, threading
        from jobs.result_stdout import result_stdout
        print("before: still stdout")
        with result_stdout() as out:
            with result_stdout() as inner:
                assert inner is out
            print("(raylet) Task abc failed. There are 3 retries remaining, so the task will be retried.")
            os.write(1, b"a C library writing to fd 1\\n")
            __import__("subprocess").run(["echo", "a child process"], check=True)
            late = threading.Timer(0.2, lambda: print("(MapWorker pid=1) a late forwarded line"))
            late.start()
            atexit.register(lambda: print("[repeated 2x across cluster] flushed at shutdown"))
            print(__import__("json").dumps({"result": "ok"}), file=out)
        late.join()
        print("after the command: still not on stdout")
    """)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    first, rest = done.stdout.split("\n", 1)
    assert first == "before: still stdout"
    assert json.loads(rest) == {"result": "ok"}
    for line in (
        "retries remaining",
        "C library",
        "a child process",
        "late forwarded",
        "flushed at shutdown",
        "after the command",
    ):
        assert line in done.stderr


def test_hxd2_index_json_stdout_is_the_summary_alone(tmp_path):
    """The whole CLI: a rejected build prints nothing on stdout; it is checked the same way as a real one."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs.cli",
            "index",
            "--input",
            str(tmp_path / "nope"),
            "--output",
            str(tmp_path / "out"),
            "--json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().startswith("error: input not found")


def test_run_and_report_json_survives_a_ray_line_printed_after_the_work_returned():
    code = textwrap.dedent("""
        import sys, threading, time
        from jobs.cli import run_and_report

        def work():
            # What Ray's error-message thread does when a worker died: print to sys.stdout, a little later.
            threading.Timer(0.3, lambda: print("(raylet) Task 9f1 failed. There are 2 retries remaining, so the "
                                               "task will be retried. Error: The worker died unexpectedly")).start()
            print("a worker's forwarded output during the work")
            return {"documents": 3}

        code = run_and_report(work, as_json=True, format_text=str)
        time.sleep(0.6)
        sys.exit(code)
    """)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"documents": 3}
    assert "retries remaining" in done.stderr and "forwarded output" in done.stderr


def test_in_process_commands_leave_sys_stdout_as_they_found_it(capsys):
    """Tests (and callers) run several commands in one process: a plain print after one still reaches stdout."""
    from jobs.cli import run_and_report

    assert run_and_report(lambda: {"n": 1}, as_json=True, format_text=str) == 0
    print("plain print afterwards")
    out = capsys.readouterr().out
    assert json.loads(out.split("plain print", 1)[0]) == {"n": 1} and "plain print afterwards" in out
