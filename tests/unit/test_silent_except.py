"""The check in ``scripts/check`` that no broad ``except`` in the library swallows in silence (issue 40, item 9):
ruff's BLE001 accepts ``log.debug(..., exc_info=True)`` and a ``# noqa: BLE001``, and a re-raise in one branch
only; this one does not."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "silent_except.py"
_spec = importlib.util.spec_from_file_location("silent_except", SCRIPT)
assert _spec is not None and _spec.loader is not None
silent_except = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(silent_except)


def _silent(body: str) -> list[int]:
    return [line for line, _ in silent_except.silent_handlers(textwrap.dedent(body))]


@pytest.mark.parametrize(
    "body",
    [
        "try:\n    f()\nexcept Exception:\n    pass\n",
        "try:\n    f()\nexcept:\n    return None\n",
        "try:\n    f()\nexcept (ValueError, BaseException):\n    x = 1\n",
        # What BLE001 accepts: a debug line with the traceback, and a noqa comment.
        "try:\n    f()\nexcept Exception:\n    log.debug('failed', exc_info=True)\n",
        "try:\n    f()\nexcept Exception:  # noqa: BLE001 - a hint\n    relations = []\n",
        # The name bound but used only in a quiet log line.
        "try:\n    f()\nexcept Exception as exc:\n    log.info('failed: %s', exc)\n",
        # The front door's old shape: re-raised when the response started, silent otherwise.
        "try:\n    f()\nexcept Exception:\n    if started.is_set():\n        raise\n",
        "with contextlib.suppress(Exception):\n    f()\n",
        "with suppress(OSError, BaseException):\n    f()\n",
    ],
)
def test_a_broad_handler_that_says_nothing_is_reported(body: str) -> None:
    assert _silent(body) == [1 if "suppress" in body else 3]


@pytest.mark.parametrize(
    "body",
    [
        "try:\n    f()\nexcept Exception:\n    cleanup()\n    raise\n",
        "try:\n    f()\nexcept Exception as exc:\n    raise HxdError('x') from exc\n",
        "try:\n    f()\nexcept Exception as exc:\n    log.warning('failed: %s', exc)\n",
        "try:\n    f()\nexcept Exception:\n    logger.exception('failed')\n",
        "try:\n    f()\nexcept Exception:\n    self.metrics.errors.inc()\n",
        "try:\n    f()\nexcept Exception:\n    stats.failed += 1\n    return None\n",
        "try:\n    f()\nexcept BaseException as exc:\n    queue.put(exc)\n",
        "try:\n    f()\nexcept Exception as exc:\n    trace['error'] = str(exc)\n",
        "try:\n    f()\nexcept Exception:\n    if started:\n        raise\n    log.warning('lost')\n",
        "try:\n    f()\nexcept Exception:\n    self.handleError(record)\n",
        # Narrow handlers are not this check's business.
        "try:\n    f()\nexcept (OSError, ValueError):\n    pass\n",
        "with contextlib.suppress(OSError):\n    f()\n",
    ],
)
def test_a_handler_that_raises_logs_counts_or_hands_on_passes(body: str) -> None:
    assert _silent(body) == []


def test_the_command_names_each_silent_handler_and_fails(tmp_path: Path) -> None:
    (tmp_path / "quiet.py").write_text("try:\n    f()\nexcept Exception:  # noqa: BLE001\n    pass\n")
    (tmp_path / "loud.py").write_text("try:\n    f()\nexcept Exception:\n    raise\n")
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stdout.count("\n") == 1 and "quiet.py:3: except Exception swallows in silence" in done.stdout
    (tmp_path / "quiet.py").unlink()
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "")
