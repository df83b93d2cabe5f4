"""A Retriever replica answers one question per served index before it reports ready.

``/healthz`` used to say ready 12 s after ``hxd2 serve`` started, while the first answer then took a minute to its
first token: the first request paid for what a process does once (vLLM compiling each structured-output grammar of
the planner, the verifier and the keyword step; the embedder's first batch; the graph's and the tokenizers' first
reads). Serve routes no request to a replica before its constructor returns, so the replica asks itself one question
per index there, through the same pipeline, LLM, embedder and part deployments a user's question takes; once the
constructor returns, the application is ready and the next question pays none of it.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import logging
import time
from typing import Any, Callable, Mapping

from hxd2_ray.graph.templates import LF_ENTITY_NAMES
from serve.handles import RequestScope, scoped

log = logging.getLogger("hxd2.serve")

# Long enough for the slowest first answer measured (the 135M model on 2 CPU cores: ~60 s); a warm-up that runs out
# of time is logged and the replica starts anyway (its first requests pay the rest).
WARM_UP_TIMEOUT_S = 240.0


def warm_up_question(index: Any) -> str:
    """A question that names an entity of the index, so the refusal gate lets it through to every stage."""
    rows = index.graph.run_template(LF_ENTITY_NAMES, {"skip": 0, "limit": 1})
    name = next((str(r.get("name") or r.get("key")) for r in rows if r.get("name") or r.get("key")), "")
    return f"What is known about {name}?" if name else "What does this collection cover?"


def warm_up(
    lives: Mapping[str, Any], pool: concurrent.futures.Executor, on_failure: Callable[[str, BaseException], None]
) -> dict[str, float]:
    """Answer one question per index in ``pool`` (as requests are answered); seconds per index."""
    seconds: dict[str, float] = {}
    for name, live in lives.items():
        started = time.perf_counter()

        def answer(live: Any = live) -> None:
            with live.pin() as pinned:
                pinned.value.pipeline.answer(warm_up_question(pinned.index))

        scope = RequestScope.after(WARM_UP_TIMEOUT_S)
        ctx = contextvars.copy_context()
        try:
            pool.submit(ctx.run, scoped, scope, answer).result(timeout=WARM_UP_TIMEOUT_S + 5)
        except Exception as exc:  # noqa: BLE001 - the replica still starts; its first request pays the rest
            on_failure(name, exc)
        seconds[name] = round(time.perf_counter() - started, 2)
        log.info("warm-up of %s: %.1f s", name, seconds[name])
    return seconds
