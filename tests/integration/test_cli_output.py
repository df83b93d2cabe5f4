"""What a user sees from ``hxd2 index`` and ``hxd2 index-kb``, run as commands: on a terminal (a pseudo-terminal)
a live progress line per stage and a table; on a pipe plain periodic lines; Ray's and Ray Data's logs in a
file under the output unless ``-v``; ``--json`` output unchanged."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.servers import free_port, stop_process_group
from tests.stand_ins import STAND_INS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "hxd2_ray" / "sample_data" / "corpus"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HXD2_PROGRESS", "RAY_ADDRESS"))}
    env.update({"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **extra})
    return env


def _hxd2(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args],
        cwd=ROOT,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def _hxd2_on_a_terminal(*args: str, timeout_s: float = 600) -> tuple[int, str]:
    """Run with stdout and stderr on a pseudo-terminal; returns the exit status and everything it drew."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", *args],
        cwd=ROOT,
        env=_env(COLUMNS="120"),
        stdin=child,
        stdout=child,
        stderr=child,
        close_fds=True,
    )
    os.close(child)
    chunks = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.5)
        if ready:
            try:
                data = os.read(main, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(main)
    return proc.wait(timeout=60), b"".join(chunks).decode("utf-8", errors="replace")


@pytest.fixture(scope="module")
def triples(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("kb") / "kb.txt"
    lines = [f"Film {i}|directed_by|Director {i % 37}" for i in range(1500)]
    lines += [f"Film {i}|release_year|{1950 + i % 60}" for i in range(1500)]
    path.write_text("\n".join(lines) + "\nnot a triple\n", encoding="utf-8")
    return path


def test_index_kb_on_a_terminal_draws_live_lines_and_a_table(triples, tmp_path):
    out = tmp_path / "kb"
    code, drawn = _hxd2_on_a_terminal(
        "index-kb", "--triples", str(triples), "--output", str(out), "--batch-size", "128", *STAND_INS
    )
    assert code == 0, drawn[-3000:]
    assert "\x1b[" in drawn  # cursor and colour codes: a live display
    text = ANSI.sub("", drawn)
    for stage in ("read", "embed", "graph", "vectors"):
        assert f"✓ {stage}" in text, stage
    assert "✓ embed  " in text and "texts 100%" in text
    assert re.search(r"embed\s.*━", text)  # the bar while embedding
    assert "logs go to" in text
    assert "[hxd2 index-kb] embedded" not in text  # the build's own log lines are in the log file
    assert "index written to" in text  # the summary
    log = next((tmp_path / "_logs").glob("kb.index-kb-*.log")).read_text()
    assert "[hxd2 index-kb] embedded" in log


def test_index_kb_on_a_pipe_prints_periodic_plain_lines_and_json_is_unchanged(triples, tmp_path):
    out = tmp_path / "kb"
    proc = _hxd2(
        "index-kb",
        "--triples",
        str(triples),
        "--output",
        str(out),
        "--batch-size",
        "128",
        *STAND_INS,
        "--json",
        HXD2_PROGRESS_INTERVAL_S="0",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)  # stdout holds the summary alone
    assert summary["triples"] == 3000 and summary["malformed_lines"] == 1
    assert "\x1b" not in proc.stderr
    lines = proc.stderr.splitlines()
    periodic = [x for x in lines if x.startswith("[hxd2] embed: ")]
    assert len(periodic) >= 2 and all(re.search(r"\d+/[\d,]+ texts \d+%", x) for x in periodic)
    assert any(x.startswith("[hxd2] embed done: ") and "texts 100%" in x for x in lines)
    assert any(x.startswith("[hxd2] read done: 3,000 triples") for x in lines)
    assert lines[-5].split()[:2] == ["stage", "items"]  # the stage table closes the output

    # The knowledge-base import writes the flat layout; the graph views open it through the same layout.
    stats = _hxd2("graph", "stats", "--index", str(out), "--json")
    assert stats.returncode == 0, stats.stderr[-3000:]
    assert json.loads(stats.stdout)["counts"]["entities"] > 0


def test_index_kb_verbose_shows_the_build_log_and_writes_no_log_file(triples, tmp_path):
    proc = _hxd2("index-kb", "--triples", str(triples), "--output", str(tmp_path / "kb"), *STAND_INS, "-v")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[hxd2 index-kb] embedded" in proc.stderr and "[hxd2] embed done" in proc.stderr
    assert not (tmp_path / "_logs").exists()


FAST = (*STAND_INS, "--set", "ray.num_cpus=2", "--set", "embedding.dim=64")


@pytest.fixture(scope="module")
def built_index(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """An index that the real ``hxd2 index`` built (the generations layout), and how that build ran."""
    tmp_path = tmp_path_factory.mktemp("built")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "sudhof.md").write_text((SAMPLE / "thomas_sudhof.md").read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "index"
    proc = _hxd2("index", "--input", str(corpus), "--output", str(out), *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_index_is_quiet_by_default_and_verbose_restores_ray_logs(built_index):
    out, quiet = built_index
    for stage in ("ingest", "extract", "merge", "embed", "write"):
        assert f"[hxd2] {stage} done: " in quiet.stderr, stage
    assert re.search(r"\[hxd2\] extract done: \d+/\d+ chunks 100% .* tok/s", quiet.stderr)
    for noise in ("Started a local Ray instance", "Starting execution of Dataset", "INFO"):
        assert noise not in quiet.stderr, noise
    logs = list((out / "_logs").glob("index-*.log"))
    assert len(logs) == 1 and str(logs[0]) in quiet.stderr
    log = logs[0].read_text()
    assert "Started a local Ray instance" in log and "Starting execution of Dataset" in log
    assert quiet.stdout.startswith("index written to ")

    # A rerun over the same input finds the index unchanged, and with -v Ray's own lines are back on stderr
    # (and no new log file).
    verbose = _hxd2("index", "--input", str(out.parent / "corpus"), "--output", str(out), *FAST, "-v")
    assert verbose.returncode == 0, verbose.stderr[-3000:]
    assert "Started a local Ray instance" in verbose.stderr
    assert "unchanged" in verbose.stdout, verbose.stdout
    assert len(list((out / "_logs").glob("index-*.log"))) == 1


def test_graph_views_open_an_index_the_index_command_built(built_index, tmp_path):
    out, _ = built_index
    assert (out / "generations").is_dir() and not (out / "graph.kuzu").exists()  # the layout the opener follows
    stats = _hxd2("graph", "stats", "--index", str(out), "--output", str(tmp_path / "stats"), "--json")
    assert stats.returncode == 0, stats.stderr[-3000:]
    counts = json.loads(stats.stdout)["counts"]
    assert counts["entities"] > 0 and counts["chunks"] > 0
    assert (tmp_path / "stats" / "stats.png").stat().st_size > 0
    for view in ("view.png", "view.html"):
        shown = _hxd2("graph", "show", "--index", str(out), "--output", str(tmp_path / view))
        assert shown.returncode == 0, shown.stderr[-3000:]
        assert (tmp_path / view).stat().st_size > 0
    exported = _hxd2(
        "graph", "export", "--index", str(out), "--format", "graphml", "--output", str(tmp_path / "graph.graphml")
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert "<graphml" in (tmp_path / "graph.graphml").read_text(encoding="utf-8")[:2000]
    missing = _hxd2("graph", "stats", "--index", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_ctrl_c_in_index_is_one_line_exit_130_and_the_rerun_finishes(tmp_path):
    import signal

    out = tmp_path / "index"
    command = [sys.executable, "-m", "jobs.cli", "index", "--input", str(SAMPLE), "--output", str(out), *FAST]
    proc = subprocess.Popen(command, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    assert proc.stderr is not None
    for line in proc.stderr:  # interrupt once the build is under way (Ray started, first stage running)
        seen.append(line)
        if line.startswith("[hxd2] ingest"):
            proc.send_signal(signal.SIGINT)
            break
    _, rest = proc.communicate(timeout=120)
    err = "".join(seen) + rest
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "hxd2 index: interrupted; run the same command again to resume" in err
    again = _hxd2("index", "--input", str(SAMPLE), "--output", str(out), *FAST)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.startswith("index written to ")


def test_a_stop_signal_while_serve_starts_stops_it_cleanly(built_index, tmp_path):
    """A stop sent to the server's whole process group (systemd, a test, ``kill -- -PGID``) while ``serve.run``
    still waits for its deployments: Ray's own processes get it too, and waiting on would end in Ray's silent
    exit 1 a minute later. It stops as Ctrl-C does: "shutting down", exit 0, no traceback."""
    import signal

    out, _ = built_index
    logs = out / "_logs"
    before = set(logs.glob("serve-*.log"))
    said = tmp_path / "said.txt"
    command = [
        sys.executable,
        "-m",
        "jobs.cli",
        "serve",
        "--index",
        f"demo={out}",
        "--port",
        str(free_port()),
        "--no-auth",
        "--num-cpus",
        "2",
        "--set",
        "embedding.dim=64",
    ]
    with open(said, "w") as sink:
        proc = subprocess.Popen(
            command, cwd=ROOT, env=_env(), stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        new = set(logs.glob("serve-*.log")) - before
        if any("Deploying new version of Deployment" in p.read_text(errors="replace") for p in new):
            break
        time.sleep(0.2)
    assert proc.poll() is None, said.read_text()
    assert "serving demo at " not in said.read_text(), "the start finished before the stop: nothing tested"
    stopped_at = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        code = proc.wait(timeout=120)
    finally:
        stop_process_group(proc)
    lines = said.read_text().strip().splitlines()
    assert code == 0, lines
    assert time.monotonic() - stopped_at < 60 and "shutting down" in lines, lines
    assert len(lines) <= 5 and not any("Traceback" in line for line in lines), lines
