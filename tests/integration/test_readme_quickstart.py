"""The README's quick start, run as it stands: the commands are read from the README's "Quick start" block.

They run in a scratch folder that looks like the repository root to them (``.venv/bin/python`` and
``.venv/bin/hxd2`` on this interpreter, ``hxd2_ray/`` with the sample data) and whose ``configs/local.yaml`` is
a fast configuration (scripted LLM, hashing embedder), so the models' minutes are not spent here; the only
other change is the HTTP port, 8000 in the README, swapped for a free one. The server command (``... &``) runs
in the background until the SDK call has been answered.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.servers import free_port, stop_process_group, wait_until_served

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FAST_CONFIG = """\
llm: {backend: scripted}
embedding: {backend: hashing, dim: 64}
vectors: {num_shards: 2, index_type: flat}
ray: {num_cpus: 2, ner_batch_size: 8, embed_batch_size: 64}
"""


def quickstart_commands(readme: str) -> list[str]:
    """The shell commands of the first ``bash`` block under "## Quick start": continuation lines joined, a
    here-document kept with its command."""
    section = readme.split("\n## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block, "the README's Quick start has no ```bash block"
    lines = block[1].splitlines()
    commands: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\") and i < len(lines):
            line = line[:-1].rstrip() + " " + lines[i].strip()
            i += 1
        heredoc = re.search(r"<<-?'?(\w+)'?", line)
        if heredoc:
            body = []
            while i < len(lines) and lines[i].strip() != heredoc[1]:
                body.append(lines[i])
                i += 1
            i += 1  # the terminator
            line = "\n".join([line, *body, heredoc[1]])
        commands.append(line)
    return commands


def test_readme_names_five_commands():
    commands = quickstart_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    kinds = [c.split()[1] if c.startswith(".venv/bin/hxd2") else c.split()[0] for c in commands]
    assert len(commands) == 5, commands
    assert commands[0].startswith(".venv/bin/hxd2 index ") and " query " in commands[1]
    assert " serve " in commands[2] and commands[2].rstrip().endswith("&")
    assert "from openai import OpenAI" in commands[3] and " eval run " in commands[4], kinds


def test_quickstart_runs_as_written(tmp_path):
    commands = quickstart_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    work = tmp_path / "repo"
    (work / "configs").mkdir(parents=True)
    (work / "configs" / "local.yaml").write_text(FAST_CONFIG, encoding="utf-8")
    os.symlink(ROOT / "hxd2_ray", work / "hxd2_ray")
    # .venv/bin holds this interpreter and an hxd2 that is `python -m jobs.cli` on it (what the installed entry
    # point runs), so the commands run the code under test whatever interpreter path an installed script names.
    venv_bin = work / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    # Shims, not symlinks: a symlinked venv interpreter outside its venv folder loses the venv's packages.
    for name, args in (("python", '"$@"'), ("hxd2", '-m jobs.cli "$@"')):
        (venv_bin / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" {args}\n', encoding="utf-8")
        (venv_bin / name).chmod(0o755)
    port = str(free_port())
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "HXD2_API_KEYS")}
    env.update({"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})

    def run(command: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            ["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=900, check=False
        )
        assert proc.returncode == 0, f"{command}\n--- stdout\n{proc.stdout[-2000:]}\n--- stderr\n{proc.stderr[-3000:]}"
        return proc

    index, query, serve, sdk, evaluate = commands
    run(index)
    assert (work / "runs" / "my-index" / "manifest.json").is_file()
    assert list((work / "runs" / "my-index" / "_logs").glob("index-*.log"))
    assert run(query).stdout.strip()

    assert "8000" in serve and "8000" in sdk
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        # Its own process group: the stop signal reaches hxd2 serve whether or not bash execs it.
        server = subprocess.Popen(
            ["bash", "-c", serve.replace("8000", port).rstrip().rstrip("&")],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until_served(f"http://127.0.0.1:{port}/healthz", server, log, said="serving my-index at ")
        answer = run(sdk.replace("8000", port)).stdout.strip()
        assert answer, "the OpenAI SDK call printed no answer"
    finally:
        stop_process_group(server)
    assert server.returncode == 0, log.read_text()[-3000:]
    said = log.read_text(encoding="utf-8").strip().splitlines()
    # Quiet by default: its own few lines (log path, URL, shutdown); Ray's and Serve's are in the log file.
    assert len(said) <= 10 and any(line.startswith("serving my-index at ") for line in said), said
    assert "\x1b[" not in log.read_text(encoding="utf-8")

    run(evaluate)
    report = work / "runs" / "my-eval" / "report.md"
    assert report.is_file() and "dual" in report.read_text(encoding="utf-8")
