"""Every ``hxd2 ...`` command the README and the docs show is one the CLI's own parsers accept (issue 45, item 6).

Each command line of a ``bash``/``sh``/``console`` block that starts with ``hxd2`` (or ``.venv/bin/hxd2``) is
split as a shell would (continuation lines joined, ``VAR=value`` prefixes, ``&`` and ``#`` comments dropped), then
handed to ``jobs.cli.main`` with argparse made to stop once the arguments have parsed: an unknown flag, a missing
required one or a bad choice fails the test with the file and the line; nothing is run. An inline code span that
names a command (```hxd2 query --mode logic```) is a mention, not a whole command: its flags and choices must
exist, its required arguments may be left out. A line that abbreviates (``...``, ``…``, ``[...]``, ``<...>``) is
skipped.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "cluster" / "README.md"]
_BLOCK = re.compile(r"```(?:bash|sh|console|shell)?\n(.*?)```", re.S)
_INLINE = re.compile(r"`((?:\.venv/bin/)?hxd2 [^`]+)`")
_ABBREVIATED = re.compile(r"\.\.\.|…|\[[^\]]*\]|<[^>]+>|\bPATH_OR_S3\b|\|")


class _Parsed(Exception):
    """Raised in place of running a command once its arguments have parsed."""


def _commands() -> list[tuple[str, str, bool]]:
    """(file, line, whole command?) for every command shown."""
    found: list[tuple[str, str, bool]] = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        where = str(path.relative_to(ROOT))
        for block in _BLOCK.findall(text):
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                line = line.strip().removeprefix("$ ")
                if re.match(r"^(\w+=\S+\s+)*(\.venv/bin/)?hxd2\s", line):
                    found.append((where, line, True))
        for span in _INLINE.findall(text):
            found.append((where, span, False))
    return found


def _argv(line: str) -> list[str] | None:
    line = re.sub(r"\s+#.*$", "", line).rstrip().removesuffix("&").rstrip()
    if _ABBREVIATED.search(re.sub(r"'[^']*'|\"[^\"]*\"", "''", line)):  # what quotes hold is a value
        return None
    try:
        words = shlex.split(line)
    except ValueError:
        return None
    while words and re.match(r"^\w+=", words[0]):
        words.pop(0)
    if not words or not words[0].endswith("hxd2"):
        return None
    cut = next((i for i, w in enumerate(words) if w in (">", "2>", "|", "&&", ";")), len(words))
    return words[1:cut]


COMMANDS = [(where, line, whole) for where, line, whole in _commands() if _argv(line) is not None]


def test_the_docs_show_commands_to_check():
    assert len(COMMANDS) >= 30, COMMANDS


@pytest.mark.parametrize(("where", "line", "whole"), COMMANDS, ids=[f"{w}:{i}" for i, (w, _, _) in enumerate(COMMANDS)])
def test_a_documented_command_parses(where, line, whole, monkeypatch, capsys):
    from jobs.cli import main

    original_parse, original_error = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.error

    def parse_then_stop(self, args=None, namespace=None):
        parsed = original_parse(self, args, namespace)  # exits 2 on an unknown flag or a missing argument
        raise _Parsed(parsed)

    def error_unless_a_mention_leaves_out_required(self, message):
        if whole or "arguments are required" not in message:
            original_error(self, message)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.setattr(argparse.ArgumentParser, "error", error_unless_a_mention_leaves_out_required)
    argv = _argv(line)
    if argv in (["--help"], []):
        return  # the usage of hxd2 itself
    try:
        code = main(argv)
    except _Parsed:
        return
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    pytest.fail(f"{where}: `{line}` does not parse (exit {code}): {err.strip()[-600:]}")
