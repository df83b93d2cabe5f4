"""Evaluation stage: answer one benchmark shard per row, score it, write its traces as one Parquet file.

:class:`AnswerQuestions` is Ray-free (a plain callable class): Ray Data runs it in an actor pool
(``map_batches(AnswerQuestions, fn_constructor_args=..., compute=ActorPoolStrategy(...))``) and tests can call
it directly. Its constructor opens the index read-only and builds the LLM, the embedder and the pipeline once
per actor. An input row is a whole shard (``shard``, ``benchmark``, ``items_json``: the shard's
``EvalItem.to_dict()`` list), so a shard's file is always written by one call, complete or not at all:
``<out_root>/shards/<mode>/shard-<NNNN>.parquet`` (atomic: temp + rename locally, one PUT on S3).

Modes: ``llm_only`` (the paper's baseline: one chat call with the generation prompt, no retrieval), ``dual``,
``logic``, ``auto`` (multi-stage, pre-check verifier) and ``auto_post`` (multi-stage, post-check verifier).
An LLM failure on one question is recorded in its trace row (``error``) and scored like an empty answer.
"""

from __future__ import annotations

import json
import posixpath
import time
from typing import Any, Iterator, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from hxd2_ray.stages import staging as st

EVAL_MODES = ("llm_only", "dual", "logic", "auto", "auto_post")

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


class _ErrorTap:
    """LLM wrapper that counts failed responses (the pipelines may absorb them and degrade)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.errors: list[str] = []
        if callable(getattr(inner, "stream", None)):
            self.stream = self._stream

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def supports_json_schema(self) -> bool:
        return bool(getattr(self.inner, "supports_json_schema", False))

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def complete(self, requests: Sequence[Any]) -> list[Any]:
        responses = self.inner.complete(requests)
        self.errors.extend(r.error for r in responses if getattr(r, "error", ""))
        return responses

    def _stream(self, request: Any) -> Iterator[str]:
        try:
            yield from self.inner.stream(request)
        except Exception as exc:  # noqa: BLE001 - recorded, then re-raised
            self.errors.append(f"{type(exc).__name__}: {exc}")
            raise


class AnswerQuestions:
    """Answer, score and persist whole shards; returns one stats row per shard."""

    def __init__(self, cfg: Any, index_location: str, mode: str, staging_fs: pafs.FileSystem, out_root: str,
                 label: str | None = None) -> None:
        if mode not in EVAL_MODES:
            raise ValueError(f"unknown eval mode {mode!r}; valid: {', '.join(EVAL_MODES)}")
        from hxd2_ray.wiring import build_llm

        self.cfg = cfg
        self.mode = mode
        self.label = label or mode
        self.fs = staging_fs
        self.out_root = out_root
        self.llm = _ErrorTap(build_llm(cfg.llm))
        self.index = None
        self.pipeline = None
        if mode != "llm_only":
            from hxd2_ray.retrieval.index import open_index
            from hxd2_ray.retrieval.multistage import build_multistage
            from hxd2_ray.wiring import build_embedder

            self.index = open_index(index_location, cfg)
            self.embedder = build_embedder(cfg.embedding)
            ms = cfg.multistage
            if mode == "auto_post":
                ms = ms.model_copy(update={"verifier_mode": "post"})
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
                "evidence_ids": evidence, "error": ""}

    def answer_item(self, spec: Any, item: Any, position: int, shard: int) -> dict[str, Any]:
        from hxd2_ray.evaluation.datasets import Prediction, score_item

        self.llm.errors.clear()
        t0 = time.perf_counter()
        try:
            row = self._llm_only(item) if self.mode == "llm_only" else self._multistage(item)
        except Exception as exc:  # noqa: BLE001 - one question's failure is recorded, not fatal
            row = {"path": "error", "answer": "", "prompt_tokens": 0, "completion_tokens": 0, "verifier": "",
                   "evidence_ids": [], "error": f"{type(exc).__name__}: {exc}"}
        latency = time.perf_counter() - t0
        llm_errors = list(self.llm.errors)
        if not row["error"] and llm_errors:
            row["error"] = f"LLM error ({len(llm_errors)} call(s)): {llm_errors[0]}"
        pred = Prediction(answer_text=row["answer"], retrieved_passage_ids=tuple(row["evidence_ids"]),
                          error=row["error"])
        scores = score_item(spec, item, pred)
        primary = scores.get(spec.primary_metric)
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
            rows = [self.answer_item(spec, item_from_dict(d), int(d["position"]), int(shard))
                    for d in json.loads(items_json)]
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
