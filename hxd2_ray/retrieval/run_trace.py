"""The record of one query as the flow builds it: what each step decided, its timings, tokens and LLM calls.

JSON-ready from the start (it is what ``--trace``, ``/v1/query`` with ``trace`` and the evaluation traces show).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator

from hxd2_ray.retrieval.results import Keywords


class RunTrace:
    """Mutable trace of one query under construction (one per query). Under ``overlap_steps`` two threads write
    into it at once, each its own keys (a dict item set is atomic in CPython); nothing reads it until they joined."""

    def __init__(
        self,
        question: str,
        mode: str,
        language: str,
        generation_question: str,
        clock: Callable[[], float] = time.perf_counter,
        topic: str | None = None,
    ):
        self.clock = clock
        # The question's topic entity when the caller gave one (a benchmark's, --topic, the API's): retrieval and
        # the graph walk start from it instead of linking a start from the text.
        self.topic = " ".join(str(topic or "").split()) or None
        self.started = clock()
        self.data: dict[str, Any] = {
            "mode": mode,
            "question": question,
            "topic": self.topic,
            "generation_question": generation_question,
            "language": language,
            "intent": None,
            "refusal": None,
            "keywords": None,
            "logic": None,
            "graphflow": None,
            "verifier": None,
            "fallback_reason": None,
            "path": None,
            "path_reason": None,
            "timings_ms": {},
            "tokens": {},
            "llm_calls": {},
            "notices": [],
        }

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.data[key] = value

    @contextlib.contextmanager
    def timed(self, step: str) -> Iterator[None]:
        t0 = self.clock()
        try:
            yield
        finally:
            self.data["timings_ms"][step] = round((self.clock() - t0) * 1000, 2)

    def tokens(self, step: str, prompt: int, completion: int, calls: int = 1) -> None:
        self.data["tokens"][step] = {"prompt": int(prompt), "completion": int(completion)}
        self.data["llm_calls"][step] = int(calls)

    def scratch(self) -> "RunTrace":
        """A trace of the same query for a step whose records may be thrown away (work started ahead)."""
        data = self.data
        return RunTrace(
            data["question"],
            data["mode"],
            data["language"],
            data["generation_question"],
            clock=self.clock,
            topic=self.topic,
        )

    def adopt(self, other: "RunTrace") -> None:
        """Take a scratch trace's timings, tokens, LLM calls and notices: its step was wanted after all."""
        for key in ("timings_ms", "tokens", "llm_calls"):
            self.data[key].update(other.data[key])
        self.data["notices"].extend(other.data["notices"])

    def keywords(self, kw: Keywords) -> None:
        """The keyword call of dual-level retrieval (one per query: the fallback reuses the gate's)."""
        self.data["keywords"] = {
            "low_level": list(kw.low_level),
            "high_level": list(kw.high_level),
            "parsed": kw.parsed,
            "raw": kw.raw,
        }
        self.tokens("keywords", kw.prompt_tokens, kw.completion_tokens)

    def notice(self, text: str) -> None:
        self.data["notices"].append(text)

    def finish(self, path: str, prompt_versions: dict[str, str]) -> dict[str, Any]:
        data = self.data
        data["path"] = path
        data["timings_ms"]["total"] = round((self.clock() - self.started) * 1000, 2)
        data["prompt_versions"] = prompt_versions
        data["tokens_total"] = {
            "prompt": sum(t["prompt"] for t in data["tokens"].values()),
            "completion": sum(t["completion"] for t in data["tokens"].values()),
        }
        return data
