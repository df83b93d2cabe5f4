"""Ask a question over a built index, in any query mode (multi-stage ``auto`` by default).

    hxd2 query --index PATH_OR_S3 [--config configs/local.yaml] [--set section.key=value] "question"
               [--mode MODE] [--policy GRAPHFLOW_POLICY_DIR] [--json] [--stream] [--trace]

Without ``--config`` the index's own recorded config is used (the embedder and LLM it was built with).

Engines' and libraries' logs (vLLM, torch, Ray) go to a log file, ``<index>/_logs/query-<time>.log`` (or
``./.hxd2/logs/`` for an S3 or read-only index), whose path is printed once; ``-v`` shows them instead.
--json prints one object (answer, references, notices, usage; trace with --trace). --stream prints the answer
as it is generated (with --json the object still comes whole at the end). --trace shows the keywords, the
matched entities and relations with their scores and channels, the chunks chosen and the tokens per section.
Exit codes: 0 answered, 2 bad input (empty question, missing/half-written/mismatched index, bad config),
1 the backend failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import functools
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable

from hxd2_ray.config import stand_ins
from hxd2_ray.errors import BackendError, HxdError
from hxd2_ray.retrieval.flow import MODES

if TYPE_CHECKING:
    from hxd2_ray.retrieval.results import Answer
from hxd2_ray.text_validation import lone_surrogate
from jobs.cli import add_config_overrides


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hxd2 query", description=__doc__.split("\n\n")[0])
    parser.add_argument("question", nargs="?", default="", help="the question (quote it)")
    parser.add_argument("--index", required=True, help="index folder or s3:// URI (as written by hxd2 index)")
    parser.add_argument(
        "--config", default=None, help="YAML config (default: the config the index was built with, from its manifest)"
    )
    add_config_overrides(parser, "override a config value (repeatable), e.g. retrieval.top_k_entities=10")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--stream", action="store_true", help="print the answer as it is generated")
    parser.add_argument("--trace", action="store_true", help="show keywords, matches, chunks and token counts")
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="auto",
        help="auto: intent -> refusal gate -> logic form -> verifier, falling back to dual-level "
        "(default); auto_post: the same with the post-check verifier; logic: logic form only; "
        "dual: dual-level only; llm_only: no retrieval; chunk_vector / dual_retrieval: "
        "retrieval only (references, no answer)",
    )
    parser.add_argument(
        "--policy",
        default=None,
        metavar="DIR",
        help="a GraphFlow policy trained for the index (hxd2 graphflow train): enables --mode "
        "graphflow and multistage.graph_walk (same as --set graphflow.policy=DIR)",
    )
    parser.add_argument(
        "--topic",
        default=None,
        metavar="NAME",
        help="the question's topic entity when you know it (as a benchmark's [brackets] give it): "
        "retrieval and the graph walk start there instead of linking a start from the text",
    )
    parser.add_argument(
        "--questions",
        default=None,
        metavar="JSONL",
        help='answer every {"question": …} line of this file with one loaded model (demo/batch)',
    )
    parser.add_argument(
        "--concurrency",
        type=_positive_int,
        default=4,
        metavar="N",
        help="with --questions: questions answered at once, their LLM calls batched by the engine; answers are "
        "printed in the file's order (default 4; 1 answers one after another)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show the engines' logs here instead of writing them to a log file"
    )
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def close_all(resources: list[Any]) -> None:
    """Close what was opened, last first (an LLM engine before the index it read); anything without close() is
    skipped."""
    for resource in reversed(resources):
        close = getattr(resource, "close", None)
        if callable(close):
            close()


def _error(message: str, out: Any = None) -> None:
    print(f"error: {message}", file=out or sys.stderr)


def main(argv: list[str] | None = None) -> int:
    with contextlib.ExitStack() as stack:  # holds the result stdout (jobs.result_stdout) once the work starts
        return _main(argv, stack)


def _main(argv: list[str] | None, stack: contextlib.ExitStack) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse has already explained
        return int(exc.code or 0)
    question = args.question or ""
    if args.questions:
        try:
            questions = _read_questions(args.questions)
        except (OSError, ValueError) as exc:
            _error(f"cannot read questions from {args.questions}: {exc}")
            return 2
        if args.topic:
            _error("--topic names the topic of one question; it does not go with --questions")
            return 2
    elif not question.strip():
        _error('the question is empty; usage: hxd2 query --index PATH "your question"')
        return 2
    elif lone_surrogate(question):  # a non-UTF-8 byte in argv arrives as one
        _error(f"the question holds a lone surrogate ({lone_surrogate(question)}): not valid Unicode text")
        return 2
    else:
        questions = [question]

    from hxd2_ray.retrieval import open_index
    from hxd2_ray.retrieval.query_config import load_query_config
    from hxd2_ray.runs.requests import policy_overrides
    from hxd2_ray.wiring import build_embedder, build_llm, build_pipeline, check_llm_server

    try:
        cfg = load_query_config(args.index, args.config, [*args.overrides, *policy_overrides(args.policy)])
        index = open_index(args.index, cfg)  # before the models: a bad index fails in a second, not a minute
        if args.mode not in ("chunk_vector", "graphflow"):  # the modes that make no LLM call need no server
            check_llm_server(cfg.llm)
    except HxdError as exc:
        _error(str(exc))
        return 2
    # stdout carries the answer (or the one JSON object): engine logs and stray library prints go to stderr.
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    from jobs.console import engine_logs_to
    from jobs.result_stdout import result_stdout

    answer_out = stack.enter_context(result_stdout())  # engines' and libraries' lines go to stderr, even at fd 1
    logs = stack.enter_context(engine_logs_to("query", args.index, verbose=args.verbose))  # ... and into the log
    terminal = logs.terminal
    if logs.path is not None:
        print(f"hxd2 query: engine logs go to {logs.path} (-v shows them here)", file=terminal, flush=True)
    for name in stand_ins(cfg):  # a user must not read a stand-in's answer as a model's
        print(f"hxd2 query: answering with {name}", file=terminal, flush=True)
    # Several questions, not streamed: answered `--concurrency` at a time over a thread-safe LLM whose engine
    # batches their calls (vLLM's async engine), printed in the file's order.
    workers = min(args.concurrency, len(questions)) if not args.stream else 1
    if workers > 1:
        ms = cfg.multistage  # every question may be in its logic-form step at once: none waits for a worker
        cfg = cfg.model_copy(
            update={"multistage": ms.model_copy(update={"logic_workers": max(ms.logic_workers, workers)})}
        )
    resources: list[Any] = [index]
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hxd2-query")
    try:
        with contextlib.redirect_stdout(sys.stderr):
            embedder = build_embedder(cfg.embedding)
            resources.append(embedder)
            # Retrieval by vectors and the learned graph walk make no LLM call: no engine is started for them.
            no_llm = args.mode in ("chunk_vector", "graphflow")
            llm = None if no_llm else build_llm(cfg.llm, concurrent=workers > 1)
            resources.append(llm)
            pipeline = build_pipeline(args.mode, index, llm, embedder, cfg)
            resources.append(pipeline)
            answers = []
            on_delta = (lambda d: _print_delta(d, answer_out)) if args.stream and not args.json else None
            asks: list[Callable[[], Answer]] = [
                functools.partial(pipeline.answer, q, on_delta=on_delta, topic=args.topic) for q in questions
            ]
            if workers > 1:  # all started now; each awaited in turn
                asks = [pool.submit(ask).result for ask in asks]
            for q, ask in zip(questions, asks):
                if len(questions) > 1 and not args.json:
                    print(f"\nQ: {q}", file=answer_out, flush=True)
                answer = ask()
                if on_delta is not None:
                    print(file=answer_out, flush=True)
                answers.append(answer)
                if len(questions) > 1:
                    _print_answer(answer, args, streamed=on_delta is not None, out=answer_out, err=terminal)
    except BackendError as exc:
        _error(str(exc), terminal)
        return 1
    except HxdError as exc:
        _error(str(exc), terminal)
        return 2
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # no question left running on an engine about to close
        close_all(resources)

    if len(questions) == 1:
        _print_answer(answers[0], args, streamed=args.stream and not args.json, out=answer_out, err=terminal)
    return 0


def _read_questions(path: str) -> list[str]:
    from hxd2_ray.retrieval.question_file import read_questions

    return read_questions(path)


def _print_answer(answer: Answer, args: argparse.Namespace, streamed: bool, out: Any, err: Any) -> None:
    data = answer.to_dict(trace=args.trace)
    if args.json:
        print(json.dumps(data, ensure_ascii=False, indent=2 if args.questions is None else None), file=out, flush=True)
        return
    if not streamed:
        print(answer.text, file=out)
    print(format_references(data["references"]), file=out)
    trace = answer.trace
    why = f" ({trace.get('path_reason')})" if trace.get("path_reason") else ""
    print(f"path: {answer.path}{why}", file=err)
    for notice in data.get("notices", [])[:3]:  # the rest are in --json and --trace
        print(f"note: {notice}", file=err)
    if args.trace:
        print(
            json.dumps({k: v for k, v in trace.items() if k != "retrieval"}, ensure_ascii=False, indent=2, default=str),
            file=out,
        )
        if trace.get("retrieval"):
            print(format_trace(trace["retrieval"]), file=out)


def _print_delta(delta: str, out: Any) -> None:
    out.write(delta)
    out.flush()


def format_references(refs: list[dict[str, Any]]) -> str:
    if not refs:
        return "\nReferences: none"
    lines = ["", "References:"]
    for i, ref in enumerate(refs, 1):
        name = ref["title"] or ref["source_id"]
        source = f" ({ref['source_id']})" if ref["title"] and ref["source_id"] != ref["title"] else ""
        # "report.pdf, page 2": where in a PDF, deck, workbook or book the chunks sit (absent from older servers)
        where = ", ".join(dict.fromkeys(loc for loc in ref.get("locations") or () if loc))
        file_name = (ref.get("source_path") or "").rsplit("/", 1)[-1]
        located = f"  {file_name}, {where}" if where else ""
        chunks = ", ".join(c[:12] for c in ref["chunk_ids"])
        lines.append(f"  [{i}] {name}{source}{located}  chunks: {chunks}")
    return "\n".join(lines)


def _hits(hits: list[dict[str, Any]]) -> str:
    return ", ".join(f"{h['channel']}({h['query'][:40]!r}) {h['score']:.3f}" for h in hits)


def format_trace(trace: dict[str, Any]) -> str:
    kw = trace["keywords"]
    lines = [
        "",
        f"Trace ({trace['language']})",
        f"  keywords  low: {'; '.join(kw['low_level']) or '-'}   high: {'; '.join(kw['high_level']) or '-'}"
        + ("" if kw["parsed"] else "   (reply unreadable)"),
        f"  entities ({len(trace['entities'])}, dropped {trace['dropped']['entities']})",
    ]
    for i, e in enumerate(trace["entities"], 1):
        lines.append(
            f"    {i:>2}. {e['name']} [{e['type']}] degree {e['degree']}  {e['origin']} {e['score']:.3f}"
            + (f"  {_hits(e['hits'])}" if e["hits"] else "")
        )
    lines.append(f"  relations ({len(trace['relations'])}, dropped {trace['dropped']['relations']})")
    for i, r in enumerate(trace["relations"], 1):
        lines.append(
            f"    {i:>2}. {r['source_name']} -- {r['target_name']}  weight {r['weight']:g} "
            f"degree {r['degree']}  "
            f"{r['origin']} {r['score']:.3f}" + (f"  {_hits(r['hits'])}" if r["hits"] else "")
        )
    lines.append(f"  chunks ({len(trace['chunks'])}, dropped {trace['dropped']['chunks']})")
    for i, c in enumerate(trace["chunks"], 1):
        lines.append(
            f"    {i:>2}. {c['id'][:12]}  {c['doc_source_id']}  mentions {c['mentions']} "
            f"entity rank {c['first_entity_rank']} score {c['score']:.3f}"
        )
    t = trace["tokens"]
    lines.append(
        f"  tokens  instructions {t['instructions']}  question {t['question']}  entities {t['entities']}  "
        f"relations {t['relations']}  chunks {t['chunks']}  total {t['total']} of {t['input_cap']}"
    )
    lines.append("  ms  " + "  ".join(f"{k} {v:.1f}" for k, v in trace["timings_ms"].items()))
    for notice in trace["notices"]:
        lines.append(f"  note: {notice}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
