"""jobs/process_reaper.py in a process of its own (a subreaper mark is process-wide): an orphaned grandchild, in a
process group of its own like vLLM's engine core under a Ray worker, is found and stopped before the process exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, os, subprocess, sys, time
from jobs.process_reaper import become_subreaper, reap_descendants
marked = become_subreaper() if sys.argv[1] == "mark" else False
# A child that starts a grandchild in a new process group and exits at once: the grandchild is orphaned.
parent = subprocess.Popen(["sh", "-c", "setsid sleep 300 & echo $!"], stdout=subprocess.PIPE, text=True)
orphan = int(parent.stdout.readline())
parent.wait()
time.sleep(0.3)
stopped = reap_descendants(grace_s=3)
time.sleep(0.2)
try:
    os.kill(orphan, 0)
    alive = True
except ProcessLookupError:
    alive = False
if alive:
    os.kill(orphan, 9)  # leave nothing behind when the reaper missed it
print(json.dumps({"marked": marked, "stopped": stopped, "alive": alive}))
"""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl child subreaper is Linux's")


def _run(mode: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_orphaned_grandchild_is_stopped_by_the_subreaper():
    result = _run("mark")
    assert result["marked"] is True
    assert result["stopped"] == ["sleep"] and result["alive"] is False, result


def test_without_the_mark_the_orphan_goes_to_init_and_is_not_found():
    result = _run("plain")
    assert result["stopped"] == [] and result["alive"] is True, result
