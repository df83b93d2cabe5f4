"""The CLI reference, generated from the argparse parsers that ``hxd2`` parses its arguments with.

Each command module builds its parsers its own way (one parser, one per subcommand, nested commands dispatched
by hand), so the parsers are not collected by name: ``hxd2 <command> [<subcommand>] --help`` is run through
``jobs.cli.main`` with parsing stopped at the first parser that is asked to parse, and that parser's help is the
reference. A new option or subcommand shows up here without anyone touching this file.
"""

from __future__ import annotations

import argparse
import functools
import importlib
from dataclasses import dataclass
from typing import Any, NoReturn

from jobs import cli

# `hxd2 index` and `hxd2 serve` dispatch these by hand (jobs/index.py::main, jobs/serve_cli.py::main: no
# SUBCOMMANDS table to read them from);
# tests/unit/test_docs_reference.py fails when a parser's prog names a command that is listed nowhere.
NESTED_COMMANDS = {"index": ("delete", "verify", "reindex-reads", "export", "import"), "serve": ("reload",)}
HELP_WIDTH = 100


@dataclass(frozen=True)
class CommandHelp:
    words: tuple[str, ...]  # ("eval", "run") for `hxd2 eval run`
    summary: str
    help: str | None  # None: the command only dispatches to its subcommands

    @property
    def name(self) -> str:
        return " ".join(("hxd2", *self.words))


class _ParserReached(BaseException):
    """Raised where a command would parse its arguments. A BaseException, so that a command's own ``except
    Exception`` or ``except SystemExit`` (``hxd2 serve`` turns argparse's exit into its status) lets it through."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def _reached(parser: argparse.ArgumentParser, *_: Any, **__: Any) -> NoReturn:
    raise _ParserReached(parser)


def parser_of(words: tuple[str, ...]) -> argparse.ArgumentParser:
    """The parser ``hxd2 *words`` parses its options with, found by running the command's own code path up to
    its first parse (every parse goes through ``parse_known_args``)."""
    original = argparse.ArgumentParser.parse_known_args
    argparse.ArgumentParser.parse_known_args = _reached
    try:
        cli.main([*words, "--help"])
    except _ParserReached as reached:
        return reached.parser
    finally:
        argparse.ArgumentParser.parse_known_args = original
    raise LookupError(f"hxd2 {' '.join(words)} --help printed its own usage without parsing: nothing to document")


def command_helps() -> list[CommandHelp]:
    """Every command and subcommand of ``hxd2``, in the order ``hxd2 --help`` lists them."""
    helps = []
    for command, (module_name, summary) in cli.COMMANDS.items():
        table = tuple(getattr(importlib.import_module(module_name), "SUBCOMMANDS", ()))
        # A command with a SUBCOMMANDS table only dispatches (`hxd2 eval` alone is `hxd2 eval run`): its
        # subcommands are its reference. One with nested commands beside its own options (`hxd2 index`) has both.
        own = None if table else _help(parser_of((command,)))
        helps.append(CommandHelp((command,), summary, own))
        for sub in table or NESTED_COMMANDS.get(command, ()):
            parser = parser_of((command, sub))
            helps.append(CommandHelp((command, sub), _first_line(parser), _help(parser)))
    return helps


def _help(parser: argparse.ArgumentParser) -> str:
    # A fixed width, so the page does not depend on the terminal that built it.
    parser.formatter_class = functools.partial(parser.formatter_class, width=HELP_WIDTH)
    return parser.format_help().rstrip()


def _first_line(parser: argparse.ArgumentParser) -> str:
    return (parser.description or "").strip().split("\n", 1)[0]


def cli_reference_page() -> str:
    helps = command_helps()
    width = max(len(name) for name in cli.COMMANDS)
    lines = [
        "# CLI reference",
        "",
        "Generated from the argparse parsers of `hxd2` each time the site is built (`docs/hooks/cli_reference.py`): "
        "each block below is what `hxd2 COMMAND --help` prints. `hxd2` loads a command's module only when the "
        "command runs, so `hxd2 --help` starts no Ray, vLLM or torch.",
        "",
        "```text",
        "usage: hxd2 COMMAND [ARGS]",
        "",
        "commands:",
        *(f"  {name:<{width}}  {summary}" for name, (_, summary) in cli.COMMANDS.items()),
        "```",
        "",
        "Exit status: 0 done; 2 a usage error or an input the command refuses, explained in one `error: ...` line; "
        "3 stopped before the end (`hxd2 index` at its token or cost budget, `hxd2 graphflow train` at a "
        "non-finite loss); 130 interrupted by Ctrl-C, in one line (a rerun of `hxd2 index` resumes the build).",
        "",
    ]
    for entry in helps:
        heading = "##" if len(entry.words) == 1 else "###"
        lines += [f"{heading} `{entry.name}`", "", entry.summary, ""]
        if entry.help is not None:
            lines += ["```text", entry.help, "```", ""]
    return "\n".join(lines)
