"""One Prometheus counter, ``hxd2_replica_failures{target}``: calls that found a replica of a deployment gone
(its actor died under the call). Serve replaces the replica and the call is retried or ends as a clean 503; this
is what shows the loss on the endpoint's metrics (exported as ``ray_hxd2_replica_failures``). Counted by the
caller (the Ingress for the Retriever, the Retriever for the LLM, Embedder and the flow's parts). Outside a Serve
replica it counts nothing."""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["HEALTH_CHECK_PERIOD_S", "count_replica_failure", "is_replica_loss"]

# How often Serve's controller checks each replica (every deployment's ``health_check_period_s``). A replica that
# dies is only replaced once a check finds it gone: at Serve's default of 10 s, a killed Retriever left the queries
# waiting for it 12 s before its replacement answered (past a 10 s deadline); at 2 s the wait is the check plus the
# replacement's start. A check is one small actor call per replica.
HEALTH_CHECK_PERIOD_S = 2.0

_COUNTER: list[Any] = []
_LOCK = threading.Lock()


def is_replica_loss(exc: BaseException) -> bool:
    """Whether ``exc`` says the called replica's actor is gone."""
    from ray.exceptions import RayActorError

    return isinstance(exc, RayActorError)


def count_replica_failure(deployment: str) -> None:
    """Count one call that found a replica of ``deployment`` gone (tag ``target``)."""
    with _LOCK:
        if not _COUNTER:
            from ray import serve
            from ray.serve.exceptions import RayServeException

            try:
                in_replica = serve.get_replica_context() is not None
            except RayServeException:  # outside a replica
                in_replica = False
            if not in_replica:
                return
            from ray.serve.metrics import Counter

            _COUNTER.append(
                Counter(
                    "hxd2_replica_failures",
                    description="Calls that found a replica of a deployment gone (its actor died under the call)",
                    tag_keys=("target",),  # Serve reserves "deployment" for the replica that records it
                )
            )
        counter = _COUNTER[0]
    try:
        counter.inc(tags={"target": deployment})
    except Exception:
        log.exception("could not count a lost %s replica", deployment)
