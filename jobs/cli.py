"""``hxd2``: one command, subcommands loaded lazily so ``hxd2 --help`` imports no Ray, vLLM or torch."""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable

from hxd2_ray.errors import HxdError
from jobs import interrupts

if TYPE_CHECKING:
    import argparse

# subcommand -> (module with main(argv) -> int, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "index": ("jobs.index", "build an index: corpus -> chunks -> loop-NER -> Kùzu graph + sharded Faiss"),
    "index-kb": ("jobs.index_kb", "index a triple file (MetaQA KB) straight into Kùzu + Faiss, no NER"),
    "query": ("jobs.query", "ask a question: multi-stage (logic form + verifier, dual-level fallback) or dual-level"),
    "eval": (
        "jobs.evaluate",
        "evaluate on a benchmark: run (modes, resumable shards), grid (an ablation: index "
        "variants x settings x modes), report, compare, judge (LLM-as-judge), corpus",
    ),
    "serve": ("jobs.serve_cli", "serve indexes over HTTP (Ray Serve): OpenAI-compatible chat completions, /v1/query"),
    "calibrate-refusal": ("jobs.calibrate", "calibrate the refusal gate's threshold on good/bad questions"),
    "keys": ("jobs.keys_cli", "tenants' API keys for hxd2 serve --keys-file: add (printed once), revoke, list"),
    "graph": (
        "jobs.graph_cli",
        "look at an index's graph: export (GraphML, Neo4j CSV, Cypher), show (PNG/HTML), stats",
    ),
    "graphflow": (
        "jobs.graphflow",
        "GraphFlow retrieval policy: train (Ray Train, GFlowNet detailed balance) or "
        "evaluate on a benchmark's questions",
    ),
}


def run_and_report(
    work: Callable[[], dict[str, Any]],
    *,
    as_json: bool,
    format_text: Callable[[dict[str, Any]], str],
    errors: tuple[type[BaseException], ...] = (HxdError, FileNotFoundError),
) -> int:
    """Run one command's work and print its summary: stdout holds the summary alone (Ray workers, the raylet and
    model loaders print, so their output goes to stderr, also when it arrives late: see
    :mod:`jobs.result_stdout`); an expected error is one ``error: ...`` line on stderr and exit status 2."""
    from jobs.result_stdout import result_stdout

    with result_stdout() as results:
        try:
            summary = work()
        except errors as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(
            json.dumps(summary, indent=2, ensure_ascii=False, default=str) if as_json else format_text(summary),
            file=results,
            flush=True,
        )
    return 0


def add_config_overrides(
    parser: argparse.ArgumentParser, description: str = "override a config value (repeatable)"
) -> None:
    """``--set SECTION.KEY=VALUE``, repeatable, into ``args.overrides``: the config overrides a command takes."""
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE", help=description
    )


def _usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items())
    return f"usage: hxd2 COMMAND [ARGS]\n\ncommands:\n{rows}\n\nRun 'hxd2 COMMAND --help' for a command's options."


def _no_colour_unless_shown(args: list[str]) -> None:
    """Engines' logs carry no colour codes unless they are shown on a terminal (``-v`` with stderr a terminal):
    otherwise they land in a log file or a pipe, where the codes are noise. Ray's driver reads RAY_COLOR_PREFIX,
    vLLM its own switch; an explicit setting of the caller's wins. Not NO_COLOR: the command's own live display
    (jobs.progress, on a terminal only) keeps its colours."""
    shown = ("-v" in args or "--verbose" in args) and os.isatty(2)
    if not shown:
        for name, value in (("RAY_COLOR_PREFIX", "0"), ("VLLM_LOGGING_COLOR", "0")):
            os.environ.setdefault(name, value)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    _no_colour_unless_shown(rest)
    if name not in COMMANDS:
        print(f"hxd2: unknown command {name!r}; valid: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    interrupts.install()
    try:
        module = importlib.import_module(COMMANDS[name][0])
        return int(module.main(rest) or 0)
    except KeyboardInterrupt:
        # One line, not the traceback of whatever the interrupt hit; every long command resumes where it stopped.
        print(f"\nhxd2 {name}: interrupted{_RESUME.get(name, '')}", file=sys.stderr, flush=True)
        return INTERRUPTED


INTERRUPTED = 130  # 128 + SIGINT, what shells report for a command stopped by Ctrl-C
_RESUME = {
    "index": "; run the same command again to resume (finished stages and chunks are kept)",
    "index-kb": "; run it again into an empty or new output folder",
    "eval": "; run the same command again to resume (answered shards are kept)",
    "graphflow": "; run the same command again (training resumes from its last checkpoint where one was written)",
}


if __name__ == "__main__":
    sys.exit(main())
