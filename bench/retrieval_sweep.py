"""Passage recall of retrieval settings on a split of a benchmark, with the LLM's keywords computed once.

    .venv/bin/python bench/retrieval_sweep.py --index runs/hotpot_index --config configs/local.yaml \
        --keywords runs/hotpot_keywords.json [--split A|B|all] [--grid retrieval.ppr_dense_share=0.05,0.2,0.5 ...]

For choosing retrieval settings without tuning to the questions they are reported on: the questions are split
in two by a hash of their id (``A``: choose settings; ``B``: report, untouched while choosing). The keyword
replies of the configured LLM are asked once for every question (one batched call) and kept in --keywords;
each setting then runs the real QueryPipeline (same index, embedder, token counter and budgets as ``hxd2 eval
run --mode dual_retrieval``) with those replies replayed, so a grid costs seconds per point. The chunk-vector
baseline is computed as the evaluation job's ``chunk_vector`` mode does. Figures for the README come from
``hxd2 eval run``; this script is for the choice and for the held-out split.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from hxd2_ray.config import load_config
from hxd2_ray.evaluation.datasets import get_benchmark
from hxd2_ray.evaluation.metrics import perfect_retrieval_at_k, recall_at_k

CHUNK_VECTOR_K = 20  # as the evaluation job's chunk_vector mode


def split_ids(ids: list[str]) -> dict[str, str]:
    """Half the ids (by the order of their sha256) are split A, the rest B: fixed, and blind to the content."""
    order = sorted(ids, key=lambda i: hashlib.sha256(i.encode()).hexdigest())
    return {i: ("A" if pos < len(order) // 2 else "B") for pos, i in enumerate(order)}


class ReplayLLM:
    """The keyword replies recorded from the real LLM; the real tokenizer for budgets; nothing else."""

    supports_json_schema = True

    def __init__(self, replies: dict[str, str], count_tokens: Any, max_model_len: int | None) -> None:
        from hxd2_ray.llm.scripted import ScriptedLLM

        def handler(req: Any) -> str:
            if req.tag != "keywords":
                raise AssertionError(f"unexpected LLM call {req.tag!r}")
            return replies[req.messages[-1]["content"]]

        self._inner = ScriptedLLM(handler, record=False)
        self.count_tokens = count_tokens
        if max_model_len:
            self.max_model_len = max_model_len

    def complete(self, requests: Any) -> Any:
        return self._inner.complete(requests)


def keyword_replies(cfg: Any, questions: list[str], cache: Path) -> dict[str, str]:
    """Reply text per keyword prompt (the last user message), asked once and cached."""
    from hxd2_ray.chunking.splitter import detect_language
    from hxd2_ray.retrieval.keywords import keyword_request
    from hxd2_ray.retrieval.query_prompts import load_query_prompts

    prompts = load_query_prompts()
    rc = cfg.retrieval
    requests = [
        keyword_request(
            q, prompts.for_language(detect_language(q)), rc.keyword_max_tokens, rc.temperature, rc.max_keywords
        )
        for q in questions
    ]
    known = json.loads(cache.read_text()) if cache.exists() else {}
    missing = [r for r in requests if r.messages[-1]["content"] not in known]
    if missing:
        from hxd2_ray.wiring import build_llm

        print(f"asking the LLM for the keywords of {len(missing)} questions (once; kept in {cache})", flush=True)
        llm = build_llm(cfg.llm)
        try:
            for req, resp in zip(missing, llm.complete(missing)):
                known[req.messages[-1]["content"]] = resp.text if not resp.error else ""
        finally:
            close = getattr(llm, "close", None)
            if callable(close):
                close()
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(known, ensure_ascii=False, indent=1))
    return known


def score(evidence: list[list[str]], gold: list[tuple[str, ...]]) -> dict[str, float]:
    n = len(gold)
    return {
        f"{name}@{k}": sum(fn(e, g, k) for e, g in zip(evidence, gold)) / n
        for k in (2, 5)
        for name, fn in (("recall", recall_at_k), ("perfect", perfect_retrieval_at_k))
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True, help="index folder (not opened with --keywords-only)")
    ap.add_argument("--config", default="configs/local.yaml")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--benchmark", default="hotpotqa")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--keywords", required=True, help="JSON cache of the LLM's keyword replies")
    ap.add_argument("--split", choices=("A", "B", "all"), default="A")
    ap.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="SECTION.KEY=V1,V2",
        help="values to sweep (repeatable: the grid is the product)",
    )
    ap.add_argument("--json", default=None, help="write every point's metrics here")
    ap.add_argument("--keywords-only", action="store_true", help="only fill the keyword cache, then stop")
    args = ap.parse_args()

    from hxd2_ray.llm.tokens import build_token_counter
    from hxd2_ray.retrieval import QueryPipeline, open_index
    from hxd2_ray.wiring import build_embedder

    cfg = load_config(args.config, args.overrides)
    items = get_benchmark(args.benchmark).load(args.data_root)
    split = split_ids([it.id for it in items])
    items = [it for it in items if args.split == "all" or split[it.id] == args.split]
    replies = keyword_replies(cfg, [it.retrieval_query for it in items], Path(args.keywords))
    if args.keywords_only:
        return
    counter = build_token_counter(cfg.llm)
    llm = ReplayLLM(replies, counter, getattr(cfg.llm, "max_model_len", None))
    embedder = build_embedder(cfg.embedding)
    index = open_index(args.index, cfg)
    gold = [tuple(it.gold_passages) for it in items]
    rows = []
    try:
        query_vectors = embedder.embed([it.retrieval_query for it in items])
        dense = []
        for vec in query_vectors:
            hits = index.family("chunk").search(vec[None, :], CHUNK_VECTOR_K)[0]
            chunk_rows = {c["id"]: c for c in index.graph.get_chunks([k for k, _ in hits])}
            ids = [chunk_rows[k]["doc_source_id"] for k, _ in hits if k in chunk_rows]
            dense.append(list(dict.fromkeys(i for i in ids if i)))
        rows.append({"setting": "chunk_vector", **score(dense, gold)})
        axes = [(a.split("=", 1)[0], a.split("=", 1)[1].split(",")) for a in args.grid]
        for values in itertools.product(*(v for _, v in axes)) if axes else [()]:
            point = dict(zip((k for k, _ in axes), values))
            point_cfg = load_config(args.config, [*args.overrides, *(f"{k}={v}" for k, v in point.items())])
            pipeline = QueryPipeline(index, llm, embedder, point_cfg.retrieval)
            started = time.perf_counter()
            evidence = []
            for it in items:
                ctx = pipeline.retrieve(it.retrieval_query)
                evidence.append(list(dict.fromkeys(c.doc_source_id for c in ctx.chunks if c.doc_source_id)))
            ms = (time.perf_counter() - started) * 1000 / max(1, len(items))
            label = " ".join(f"{k.split('.')[-1]}={v}" for k, v in point.items()) or "config"
            rows.append({"setting": label, **score(evidence, gold), "ms_per_question": round(ms, 1), **point})
            print(
                f"{label:<60} "
                + "  ".join(f"{k} {rows[-1][k]:.3f}" for k in ("recall@2", "recall@5", "perfect@2", "perfect@5")),
                flush=True,
            )
    finally:
        index.close()
    base = rows[0]
    print(
        f"\nsplit {args.split}: {len(items)} questions; chunk_vector recall@2 {base['recall@2']:.3f} "
        f"recall@5 {base['recall@5']:.3f} perfect@2 {base['perfect@2']:.3f} perfect@5 {base['perfect@5']:.3f}"
    )
    best = max(rows[1:], key=lambda r: (r["recall@2"] + r["recall@5"], r["recall@5"]))
    print(
        f"best (recall@2 + recall@5): {best['setting']}: "
        + ", ".join(
            f"{k} {best[k]:.3f} ({best[k] - base[k]:+.3f})" for k in ("recall@2", "recall@5", "perfect@2", "perfect@5")
        )
    )
    if args.json:
        Path(args.json).write_text(yaml.safe_dump(rows) if args.json.endswith(".yaml") else json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
