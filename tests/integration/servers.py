"""Servers the integration tests start as processes of their own (``start_new_session=True``: a group to stop)."""

from __future__ import annotations

import os
import signal
import subprocess


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
