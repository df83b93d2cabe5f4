"""Evaluation stage: answer one benchmark shard per row, score it, write its traces as one Parquet file.

:class:`AnswerQuestions` is Ray-free (a plain callable class): Ray Data runs it in an actor pool
(``map_batches(AnswerQuestions, fn_constructor_args=..., compute=ActorPoolStrategy(...))``) and tests can call
it directly. Its constructor opens the index read-only and builds the LLM, the embedder and the pipeline once
per actor. An input row is a whole shard (``shard``, ``benchmark``, ``items_json``: the shard's
``EvalItem.to_dict()`` list), so a shard's file is always written by one call, complete or not at all
(:mod:`hxd2_ray.stages.eval_traces`). :func:`answer_in_process` runs it without Ray.

Modes: every mode of the query flow (:data:`hxd2_ray.retrieval.flow.MODES`), built by
:func:`hxd2_ray.wiring.build_pipeline` exactly as the CLI and Serve build it: ``llm_only`` (the paper's baseline),
``dual``, ``logic``, ``auto`` (multi-stage, pre-check verifier), ``auto_post`` (post-check), and the retrieval-only
``chunk_vector`` / ``dual_retrieval`` (passage recall, nothing generated).
An LLM failure on one question is recorded in its trace row (``error``) and scored like an empty answer.

Concurrency: with ``concurrency > 1`` the questions of a shard are answered by that many threads at once, over
a thread-safe LLM (``build_llm(..., concurrent=True)``: vLLM's async engine), so the engine batches the
questions' calls together instead of decoding one sequence at a time. Rows keep their positions.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from hxd2_ray.evaluation.datasets import EvalItem, Prediction, get_benchmark, score_item
from hxd2_ray.llm.wrappers import ErrorTally
from hxd2_ray.progress import NO_COUNTER, StageCounter
from hxd2_ray.retrieval.flow import MODES as EVAL_MODES
from hxd2_ray.retrieval.flow import RETRIEVAL_ONLY_MODES
from hxd2_ray.retrieval.index import open_index
from hxd2_ray.stages import staging as st
from hxd2_ray.stages.eval_traces import SHARD_STATS, TRACES, shard_path
from hxd2_ray.wiring import build_embedder, build_llm, build_pipeline

__all__ = [
    "EVAL_MODES",
    "RETRIEVAL_ONLY_MODES",
    "SHARD_STATS",
    "TRACES",
    "AnswerQuestions",
    "answer_in_process",
    "shard_path",
]


def item_from_dict(d: dict[str, Any]) -> EvalItem:
    return EvalItem(
        id=str(d["id"]),
        question=d["question"],
        answers=tuple(d.get("answers") or ()),
        gold_passages=tuple(d.get("gold_passages") or ()),
        choices=tuple(tuple(c) for c in d.get("choices") or ()),
        task=d.get("task", "generic"),
        meta=dict(d.get("meta") or {}),
        topic=str(d.get("topic") or ""),
    )


class AnswerQuestions:
    """Answer, score and persist whole shards; returns one stats row per shard."""

    def __init__(
        self,
        cfg: Any,
        index_location: str,
        mode: str,
        staging_fs: pafs.FileSystem,
        out_root: str,
        label: str | None = None,
        concurrency: int = 1,
        counter: StageCounter = NO_COUNTER,
    ) -> None:
        if mode not in EVAL_MODES:
            raise ValueError(f"unknown eval mode {mode!r}; valid: {', '.join(EVAL_MODES)}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        # Every concurrent question may be in its logic-form step at once; none should queue for a worker.
        ms = cfg.multistage
        cfg = cfg.model_copy(
            update={"multistage": ms.model_copy(update={"logic_workers": max(ms.logic_workers, concurrency)})}
        )
        self.cfg = cfg
        self.mode = mode
        self.label = label or mode
        self.fs = staging_fs
        self.out_root = out_root
        self.concurrency = concurrency
        self.counter = counter  # each answered question: progress and metrics of the job
        # chunk_vector never calls the LLM, llm_only never reads the index: neither loads what it does not use.
        self.llm = None if mode == "chunk_vector" else ErrorTally(build_llm(cfg.llm, concurrent=concurrency > 1))
        self.index = None
        embedder = None
        if mode != "llm_only":
            self.index = open_index(index_location, cfg)
            embedder = build_embedder(cfg.embedding)
        self.pipeline = build_pipeline(mode, self.index, self.llm, embedder, cfg)

    # ------------------------------------------------------------------ one question

    def _answer(self, item: Any) -> dict[str, Any]:
        ans = self.pipeline.answer(
            item.retrieval_query, generation_question=item.generation_prompt, topic=item.topic or None
        )
        trace = ans.trace
        totals = trace.get("tokens_total") or {}
        ver = trace.get("verifier") or {}
        verifier = ("yes" if ver.get("supported") else "no") if ver.get("ran") else ""
        evidence = list(dict.fromkeys(r.source_id for r in ans.references if r.source_id))
        return {
            "path": ans.path,
            "answer": ans.text or "",
            "prompt_tokens": int(totals.get("prompt", 0)),
            "completion_tokens": int(totals.get("completion", 0)),
            "verifier": verifier,
            "evidence_ids": evidence,
            "error": "",
            "path_reason": str(trace.get("path_reason") or ""),
            "candidates": list(ans.candidates),
        }

    def answer_item(self, spec: Any, item: Any, position: int, shard: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        with ErrorTally.collect() as llm_errors:
            try:
                row = self._answer(item)
            except Exception as exc:  # noqa: BLE001 - one question's failure is recorded, not fatal
                row = {
                    "path": "error",
                    "answer": "",
                    "prompt_tokens": 0,
                    "completion_tokens": 0,
                    "verifier": "",
                    "evidence_ids": [],
                    "error": f"{type(exc).__name__}: {exc}",
                }
        latency = time.perf_counter() - t0
        if not row["error"] and llm_errors:
            row["error"] = f"LLM error ({len(llm_errors)} call(s)): {llm_errors[0]}"
        row.setdefault("candidates", [])
        pred = Prediction(
            answer_text=row["answer"],
            retrieved_passage_ids=tuple(row["evidence_ids"]),
            answers=tuple(row["candidates"]),
            error=row["error"],
        )
        scores = score_item(spec, item, pred)
        primary = scores.get(spec.primary_metric)
        self.counter.add(
            done=1,
            correct=int(primary is not None and primary >= 0.5),
            failed=int(bool(row["error"])),
            prompt_tokens=row["prompt_tokens"],
            completion_tokens=row["completion_tokens"],
        )
        row.setdefault("path_reason", "")
        return {
            "id": item.id,
            "position": position,
            "shard": shard,
            "mode": self.label,
            **row,
            "scores": json.dumps(scores, sort_keys=True),
            "correct": bool(primary is not None and primary >= 0.5),
            "latency_s": latency,
            "llm_errors": len(llm_errors),
        }

    # ------------------------------------------------------------------ one batch of shards

    def __call__(self, batch: pa.Table) -> pa.Table:
        stats = []
        for shard, bench, items_json in zip(
            batch.column("shard").to_pylist(),
            batch.column("benchmark").to_pylist(),
            batch.column("items_json").to_pylist(),
            strict=True,
        ):
            t0 = time.perf_counter()
            spec = get_benchmark(bench)
            items = json.loads(items_json)

            def answer(d: dict[str, Any], spec: Any = spec, shard: int = int(shard)) -> dict[str, Any]:
                return self.answer_item(spec, item_from_dict(d), int(d["position"]), shard)

            if self.concurrency > 1 and len(items) > 1:
                with ThreadPoolExecutor(
                    max_workers=min(self.concurrency, len(items)), thread_name_prefix="hxd2-eval"
                ) as pool:
                    rows = list(pool.map(answer, items))  # in input order
            else:
                rows = [answer(d) for d in items]
            table = pa.Table.from_pylist(rows, schema=TRACES) if rows else TRACES.empty_table()
            st.write_table_atomic(self.fs, shard_path(self.out_root, self.label, int(shard)), table)
            stats.append(
                {
                    "mode": self.label,
                    "shard": int(shard),
                    "questions": len(rows),
                    "errors": sum(1 for r in rows if r["error"]),
                    "seconds": time.perf_counter() - t0,
                }
            )
        return pa.Table.from_pylist(stats, schema=SHARD_STATS)

    def close(self) -> None:
        self.pipeline.close()
        if self.index is not None:
            self.index.close()


def answer_in_process(job: Any) -> pa.Table:
    """A :class:`~hxd2_ray.runs.evaluation.ShardRunner` without Ray: one :class:`AnswerQuestions` in this process
    answers the job's shards one after another (unit tests, and a laptop run of a small benchmark)."""
    answerer = AnswerQuestions(job.cfg, job.index, job.mode, job.fs, job.root, None, job.concurrency)
    try:
        return pa.concat_tables([answerer(pa.Table.from_pylist([row])) for row in job.rows])
    finally:
        answerer.close()
