"""Servers the integration tests start as processes of their own (``start_new_session=True``: a group to stop)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def stop_process_group(proc: subprocess.Popen, grace_s: float = 120) -> None:
    """SIGTERM to the server's whole process group (its engine's and Ray's processes too), SIGKILL after
    ``grace_s``."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def kill_session_leftovers(session_id: int) -> list[str]:
    """SIGKILL every process still in session ``session_id`` (a server started with ``start_new_session``, after it
    exited: what it left behind); returns them as "name (pid)", so a test can assert there were none."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[3]) == session_id:  # state, ppid, pgrp, session
            found.append(f"{name} ({entry.name})")
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_served(
    url: str, proc: subprocess.Popen, log: Path, *, said: str | None = None, timeout_s: float = 600
) -> None:
    """Until ``url`` answers 200 and, where ``said`` is given, the server's output (``log``) holds it: an hxd2
    serve's health route can answer while other deployments still start, so a caller waits for its "serving"
    line, as a user does."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        if said is not None and said not in log.read_text(encoding="utf-8", errors="replace"):
            time.sleep(1)
            continue
        try:
            with urllib.request.urlopen(url, timeout=3) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"no answer at {url} after {timeout_s:.0f}s:\n{log.read_text()[-3000:]}")
