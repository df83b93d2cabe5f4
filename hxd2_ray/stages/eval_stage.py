"""Evaluation stage: answer one benchmark shard per row, score it, write its traces as one Parquet file.

:class:`AnswerQuestions` is Ray-free (a plain callable class): Ray Data runs it in an actor pool
(``map_batches(AnswerQuestions, fn_constructor_args=..., compute=ActorPoolStrategy(...))``) and tests can call
it directly. Its constructor opens the index read-only and builds the LLM, the embedder and the pipeline once
per actor. An input row is a whole shard (``shard``, ``benchmark``, ``items_json``: the shard's
``EvalItem.to_dict()`` list), so a shard's file is always written by one call, complete or not at all:
``<out_root>/shards/<mode>/shard-<NNNN>.parquet`` (atomic: temp + rename locally, one PUT on S3).

Modes: ``llm_only`` (the paper's baseline: one chat call with the generation prompt, no retrieval), ``dual``,
``logic``, ``auto`` (multi-stage, pre-check verifier) and ``auto_post`` (multi-stage, post-check verifier).
Two retrieval-only modes answer nothing and exist for passage recall: ``chunk_vector`` (the question's
embedding against the chunk vectors, nothing else) and ``dual_retrieval`` (the dual-level retrieval's
budgeted chunks, in their ranked order, without generation).
An LLM failure on one question is recorded in its trace row (``error``) and scored like an empty answer.

Concurrency: with ``concurrency > 1`` the questions of a shard are answered by that many threads at once, over
a thread-safe LLM (``build_llm(..., concurrent=True)``: vLLM's async engine), so the engine batches the
questions' calls together instead of decoding one sequence at a time. Rows keep their positions.
"""

from __future__ import annotations

import contextvars
import json
import posixpath
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from hxd2_ray.llm.base import LLMWrapper
from hxd2_ray.progress import NO_COUNTER, StageCounter
from hxd2_ray.stages import staging as st

EVAL_MODES = ("llm_only", "dual", "logic", "auto", "auto_post", "chunk_vector", "dual_retrieval")
RETRIEVAL_ONLY_MODES = ("chunk_vector", "dual_retrieval")
# chunk_vector: chunks searched per question, enough for recall@k up to ~10 distinct passages.
_CHUNK_VECTOR_K = 20

TRACES = pa.schema([
    ("id", pa.string()),
    ("position", pa.int64()),
    ("shard", pa.int64()),
    ("mode", pa.string()),
    ("path", pa.string()),
    ("answer", pa.string()),
    ("scores", pa.string()),  # JSON {metric: float}
    ("correct", pa.bool_()),
    ("latency_s", pa.float64()),
    ("prompt_tokens", pa.int64()),
    ("completion_tokens", pa.int64()),
    ("verifier", pa.string()),  # "yes" / "no" / "" (did not run)
    ("evidence_ids", pa.list_(pa.string())),  # source ids of the referenced documents, in order
    ("llm_errors", pa.int64()),
    ("error", pa.string()),
    # Why the answer took its path (e.g. "fallback: invalid plan: ..."); null in shards written before it existed.
    ("path_reason", pa.string()),
])

SHARD_STATS = pa.schema([
    ("mode", pa.string()),
    ("shard", pa.int64()),
    ("questions", pa.int64()),
    ("errors", pa.int64()),
    ("seconds", pa.float64()),
])


def shard_path(out_root: str, mode: str, shard: int) -> str:
    return posixpath.join(out_root, "shards", mode, f"shard-{shard:04d}.parquet")


def item_from_dict(d: dict[str, Any]):
    from hxd2_ray.evaluation.datasets import EvalItem

    return EvalItem(id=str(d["id"]), question=d["question"], answers=tuple(d.get("answers") or ()),
                    gold_passages=tuple(d.get("gold_passages") or ()),
                    choices=tuple(tuple(c) for c in d.get("choices") or ()), task=d.get("task", "generic"),
                    meta=dict(d.get("meta") or {}))


# Failed LLM responses of the question being answered in this context (threads answer questions concurrently;
# the multi-stage pipeline carries the context into its logic-form worker threads).
_QUESTION_ERRORS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("hxd2_question_errors",
                                                                                    default=None)


class _ErrorTap(LLMWrapper):
    """LLM wrapper that counts failed responses per question (the pipelines may absorb them and degrade)."""

    @staticmethod
    def _record(error: str) -> None:
        errors = _QUESTION_ERRORS.get()
        if errors is not None:
            errors.append(error)

    def complete(self, requests: Sequence[Any]) -> list[Any]:
        responses = self.inner.complete(requests)
        for r in responses:
            if getattr(r, "error", ""):
                self._record(r.error)
        return responses

    def _stream(self, request: Any) -> Iterator[str]:
        try:
            yield from self.inner.stream(request)
        except Exception as exc:  # noqa: BLE001 - recorded, then re-raised
            self._record(f"{type(exc).__name__}: {exc}")
            raise


class AnswerQuestions:
    """Answer, score and persist whole shards; returns one stats row per shard."""

    def __init__(self, cfg: Any, index_location: str, mode: str, staging_fs: pafs.FileSystem, out_root: str,
                 label: str | None = None, concurrency: int = 1, counter: StageCounter = NO_COUNTER) -> None:
        if mode not in EVAL_MODES:
            raise ValueError(f"unknown eval mode {mode!r}; valid: {', '.join(EVAL_MODES)}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        from hxd2_ray.wiring import build_llm

        self.cfg = cfg
        self.mode = mode
        self.label = label or mode
        self.fs = staging_fs
        self.out_root = out_root
        self.concurrency = concurrency
        self.counter = counter  # each answered question: progress and metrics of the job
        # chunk_vector never calls the LLM: do not load one.
        self.llm = None if mode == "chunk_vector" else _ErrorTap(build_llm(cfg.llm, concurrent=concurrency > 1))
        self.index = None
        self.pipeline = None
        if mode != "llm_only":
            from hxd2_ray.retrieval.index import open_index
            from hxd2_ray.wiring import build_embedder

            self.index = open_index(index_location, cfg)
            self.embedder = build_embedder(cfg.embedding)
        if self.llm is not None and self.index is not None:
            from hxd2_ray.retrieval.multistage import build_multistage

            ms = cfg.multistage
            if mode == "auto_post":
                ms = ms.model_copy(update={"verifier_mode": "post"})
            # Every concurrent question may be in its logic-form stage at once; none should queue for a worker.
            ms = ms.model_copy(update={"logic_workers": max(ms.logic_workers, concurrency)})
            self.pipeline = build_multistage(self.index, self.llm, self.embedder, cfg, ms)

    # ------------------------------------------------------------------ one question

    def _llm_only(self, item: Any) -> dict[str, Any]:
        from hxd2_ray.llm.base import LLMRequest

        req = LLMRequest(messages=({"role": "user", "content": item.generation_prompt},),
                         max_tokens=self.cfg.retrieval.answer_max_tokens, tag="answer")
        resp = self.llm.complete([req])[0]
        return {"path": "llm_only", "answer": resp.text or "", "prompt_tokens": int(resp.prompt_tokens),
                "completion_tokens": int(resp.completion_tokens), "verifier": "", "evidence_ids": [],
                "error": resp.error or ""}

    def _multistage(self, item: Any) -> dict[str, Any]:
        run_mode = "auto" if self.mode == "auto_post" else self.mode
        ans = self.pipeline.answer(item.retrieval_query, mode=run_mode,  # type: ignore[union-attr]
                                   generation_question=item.generation_prompt)
        trace = ans.trace or {}
        totals = trace.get("tokens_total") or {}
        ver = trace.get("verifier") or {}
        verifier = ("yes" if ver.get("supported") else "no") if ver.get("ran") else ""
        evidence = list(dict.fromkeys(r.source_id for r in ans.references if r.source_id))
        return {"path": ans.path, "answer": ans.text or "", "prompt_tokens": int(totals.get("prompt", 0)),
                "completion_tokens": int(totals.get("completion", 0)), "verifier": verifier,
                "evidence_ids": evidence, "error": "", "path_reason": str(trace.get("path_reason") or "")}

    def _chunk_vector(self, item: Any) -> dict[str, Any]:
        query = self.embedder.embed([item.retrieval_query])
        hits = self.index.family("chunk").search(query, _CHUNK_VECTOR_K)[0]  # type: ignore[union-attr]
        rows = {c["id"]: c for c in self.index.graph.get_chunks([key for key, _ in hits])}  # type: ignore[union-attr]
        evidence = [rows[key]["doc_source_id"] for key, _ in hits if key in rows and rows[key]["doc_source_id"]]
        return {"path": "chunk_vector", "answer": "", "prompt_tokens": 0, "completion_tokens": 0, "verifier": "",
                "evidence_ids": list(dict.fromkeys(evidence)), "error": ""}

    def _dual_retrieval(self, item: Any) -> dict[str, Any]:
        context = self.pipeline.dual.retrieve(item.retrieval_query)  # type: ignore[union-attr]
        evidence = [c.doc_source_id for c in context.chunks if c.doc_source_id]
        return {"path": "dual_retrieval", "answer": "", "prompt_tokens": 0, "completion_tokens": 0,
                "verifier": "", "evidence_ids": list(dict.fromkeys(evidence)), "error": ""}

    def _answer(self, item: Any) -> dict[str, Any]:
        match self.mode:
            case "llm_only":
                return self._llm_only(item)
            case "chunk_vector":
                return self._chunk_vector(item)
            case "dual_retrieval":
                return self._dual_retrieval(item)
        return self._multistage(item)

    def answer_item(self, spec: Any, item: Any, position: int, shard: int) -> dict[str, Any]:
        from hxd2_ray.evaluation.datasets import Prediction, score_item

        errors: list[str] = []
        token = _QUESTION_ERRORS.set(errors)
        t0 = time.perf_counter()
        try:
            row = self._answer(item)
        except Exception as exc:  # noqa: BLE001 - one question's failure is recorded, not fatal
            row = {"path": "error", "answer": "", "prompt_tokens": 0, "completion_tokens": 0, "verifier": "",
                   "evidence_ids": [], "error": f"{type(exc).__name__}: {exc}"}
        finally:
            _QUESTION_ERRORS.reset(token)
        latency = time.perf_counter() - t0
        llm_errors = list(errors)
        if not row["error"] and llm_errors:
            row["error"] = f"LLM error ({len(llm_errors)} call(s)): {llm_errors[0]}"
        pred = Prediction(answer_text=row["answer"], retrieved_passage_ids=tuple(row["evidence_ids"]),
                          error=row["error"])
        scores = score_item(spec, item, pred)
        primary = scores.get(spec.primary_metric)
        row.setdefault("path_reason", "")
        self.counter.add(done=1, correct=int(primary is not None and primary >= 0.5), failed=int(bool(row["error"])),
                         prompt_tokens=row["prompt_tokens"], completion_tokens=row["completion_tokens"])
        return {"id": item.id, "position": position, "shard": shard, "mode": self.label, **row,
                "scores": json.dumps(scores, sort_keys=True), "correct": bool(primary is not None and primary >= 0.5),
                "latency_s": latency, "llm_errors": len(llm_errors)}

    # ------------------------------------------------------------------ one batch of shards

    def __call__(self, batch: pa.Table) -> pa.Table:
        from hxd2_ray.evaluation.datasets import get_benchmark

        stats = []
        for shard, bench, items_json in zip(batch.column("shard").to_pylist(), batch.column("benchmark").to_pylist(),
                                            batch.column("items_json").to_pylist(), strict=True):
            t0 = time.perf_counter()
            spec = get_benchmark(bench)
            items = json.loads(items_json)

            def answer(d: dict[str, Any], spec: Any = spec, shard: int = int(shard)) -> dict[str, Any]:
                return self.answer_item(spec, item_from_dict(d), int(d["position"]), shard)

            if self.concurrency > 1 and len(items) > 1:
                with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items)),
                                        thread_name_prefix="hxd2-eval") as pool:
                    rows = list(pool.map(answer, items))  # in input order
            else:
                rows = [answer(d) for d in items]
            table = pa.Table.from_pylist(rows, schema=TRACES) if rows else TRACES.empty_table()
            st.write_table_atomic(self.fs, shard_path(self.out_root, self.label, int(shard)), table)
            stats.append({"mode": self.label, "shard": int(shard), "questions": len(rows),
                          "errors": sum(1 for r in rows if r["error"]), "seconds": time.perf_counter() - t0})
        return pa.Table.from_pylist(stats, schema=SHARD_STATS)

    def close(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
        if self.index is not None:
            self.index.close()
