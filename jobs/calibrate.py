"""Calibrate the refusal gate's threshold on labelled questions.

    hxd2 calibrate-refusal --index PATH_OR_S3 --good good.jsonl --bad bad.jsonl
                           [--config configs/local.yaml] [--set section.key=value] [--out DIR]
                           [--rule keywords|question|min]

good.jsonl holds questions the knowledge base should answer, bad.jsonl off-topic ones: one JSON object per
line with a "question" field (a bare JSON string per line works too; blank lines and lines starting with #
are skipped). Each question is scored exactly as the multi-stage pipeline's refusal gate scores it under
``--rule`` (default: the config's ``multistage.refusal_rule``, so the rule the index's queries gate with):
``keywords`` (the reference's rule), the LLM's dual-level
keywords (one batched call for all questions) against the entity_mix / relation_mix families; ``question``,
the question's own embedding (no LLM); ``min``, the lower of the two.
The threshold maximising F1 of "answer the good ones" is printed with its precision and recall, and
``calibration.json`` (threshold, metrics, curve, every question's score) and ``calibration.png`` (the
precision-recall curve and the chosen point) are written to --out (default: the current folder).

Exit codes: 0 done, 2 bad input (missing files, fewer than one good and one bad question, bad index or
config), 1 the backend failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from hxd2_ray.errors import BackendError, HxdError
from hxd2_ray.text_validation import lone_surrogate
from jobs.query import close_all


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hxd2 calibrate-refusal", description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", required=True, help="index folder or s3:// URI (as written by hxd2 index)")
    parser.add_argument("--good", required=True, help="JSONL of questions the knowledge base should answer")
    parser.add_argument("--bad", required=True, help="JSONL of off-topic questions that should be refused")
    parser.add_argument(
        "--config", default=None, help="YAML config (default: the config the index was built with, from its manifest)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value (repeatable)",
    )
    parser.add_argument("--out", default=".", help="folder for calibration.json and calibration.png")
    parser.add_argument(
        "--rule",
        choices=("keywords", "question", "min"),
        default=None,
        help="how a question is scored: keywords, question (no LLM) or min (default: the config's "
        "multistage.refusal_rule)",
    )
    return parser


def read_questions(path: str | os.PathLike[str]) -> list[str]:
    """Questions of a JSONL file: {"question": ...} objects (also "query"/"text"/"q") or bare strings."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no such file: {p}")
    out: list[str] = []
    for lineno, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{p}:{lineno}: not JSON ({exc})") from None
        if isinstance(item, dict):
            item = next((item[k] for k in ("question", "query", "text", "q") if isinstance(item.get(k), str)), None)
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f'{p}:{lineno}: expected {{"question": "..."}} or a JSON string')
        if where := lone_surrogate(item):
            raise ValueError(f"{p}:{lineno}: the question holds a lone surrogate ({where}), not valid Unicode text")
        out.append(item.strip())
    return out


def extract_keywords_batch(llm: Any, questions: list[str], cfg: Any) -> tuple[list[Any], list[str]]:
    """Keywords of every question with one batched LLM call (vLLM schedules them together)."""
    from hxd2_ray.chunking.splitter import detect_language
    from hxd2_ray.retrieval.keywords import keyword_request, parse_keywords
    from hxd2_ray.retrieval.query_prompts import load_query_prompts
    from hxd2_ray.retrieval.results import Keywords

    prompts = load_query_prompts()
    rc = cfg.retrieval
    requests = [
        keyword_request(
            q, prompts.for_language(detect_language(q)), rc.keyword_max_tokens, rc.temperature, rc.max_keywords
        )
        for q in questions
    ]
    responses = llm.complete(requests)
    keywords, notes = [], []
    for q, resp in zip(questions, responses):
        if resp.error:
            keywords.append(Keywords(parsed=False))
            notes.append(f"keyword call failed for {q[:60]!r}: {resp.error}")
        else:
            keywords.append(parse_keywords(resp.text, rc.max_keywords))
    return keywords, notes


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)

    from hxd2_ray.retrieval.index import open_index
    from hxd2_ray.retrieval.query_config import load_query_config
    from hxd2_ray.retrieval.refusal import RefusalGate, calibrate_threshold, plot_calibration
    from hxd2_ray.wiring import build_embedder, build_llm

    try:
        good = read_questions(args.good)
        bad = read_questions(args.bad)
    except (OSError, ValueError) as exc:
        _error(str(exc))
        return 2
    if not good or not bad:
        _error(f"need at least one good and one bad question; got {len(good)} good and {len(bad)} bad")
        return 2
    try:
        cfg = load_query_config(args.index, args.config, args.overrides)
        index = open_index(args.index, cfg)
        rule = args.rule or cfg.multistage.refusal_rule
    except HxdError as exc:
        _error(str(exc))
        return 2

    resources: list[Any] = [index]
    notes: list[str] = []
    try:
        # Library and engine chatter goes to stderr; stdout carries the result only.
        with contextlib.redirect_stdout(sys.stderr):
            embedder = build_embedder(cfg.embedding)
            resources.append(embedder)
            questions = good + bad
            if rule != "question":
                os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
                llm = build_llm(cfg.llm)
                resources.append(llm)
                keywords, notes = extract_keywords_batch(llm, questions, cfg)
            else:
                keywords = [None] * len(questions)
            gate = RefusalGate(index, embedder, threshold=0.0, rule=rule)
            scores = gate.scores(questions, keywords)
    except BackendError as exc:
        _error(str(exc))
        return 1
    except HxdError as exc:
        _error(str(exc))
        return 2
    finally:
        close_all(resources)

    good_scores = [s.score for s in scores[: len(good)]]
    bad_scores = [s.score for s in scores[len(good) :]]
    cal = calibrate_threshold(good_scores, bad_scores)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (q, s) in enumerate(zip(questions, scores)):
        kw = keywords[i]
        row = {"label": "good" if i < len(good) else "bad", "question": q, **s.to_dict()}
        row.pop("threshold", None)
        row["answered"] = s.score >= cal.threshold
        row.pop("refused", None)
        if kw is not None:
            row["keywords"] = {"low_level": list(kw.low_level), "high_level": list(kw.high_level), "parsed": kw.parsed}
        rows.append(row)
    report = {
        **cal.to_dict(),
        "index": args.index,
        "embedding_model": index.manifest.embedding_model_id,
        "rule": rule,
        "good_file": str(args.good),
        "bad_file": str(args.bad),
        "notes": notes,
        "questions": rows,
    }
    (out / "calibration.json").write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    plot_calibration(cal, out / "calibration.png", title=f"Refusal gate calibration (rule: {rule})")
    c = cal.counts
    print(f"threshold {cal.threshold:.4f}  precision {cal.precision:.3f}  recall {cal.recall:.3f}  F1 {cal.f1:.3f}")
    print(f"  good answered {c['tp']}/{cal.n_good}, bad refused {c['tn']}/{cal.n_bad}")
    print(f"  set it with: multistage.refusal_threshold={cal.threshold:.4f} multistage.refusal_rule={rule}")
    print(f"  wrote {out / 'calibration.json'} and {out / 'calibration.png'}")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
