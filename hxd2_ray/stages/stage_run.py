"""What the LLM and embedding actors of one indexing run share: the LLM response cache, the usage ledger (tokens,
cost, the budget) and the prompt version; and the node an actor runs on, for the files it reports.

:class:`StageRun` is picklable and travels to every actor as a constructor argument. Its ledger is a
:class:`~hxd2_ray.stages.cost.UsageLedger` in one process, or a :class:`RemoteLedger` over the job's ledger
actor on Ray. :class:`IndexingLLM` puts the cache (when enabled) above a meter above the backend, so the meter
counts only real calls.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from typing import Any, Protocol

from hxd2_ray.llm.base import LLMClient
from hxd2_ray.llm.cache import CachedLLM, CacheLocation, ResponseStore
from hxd2_ray.llm.metering import MeteredLLM
from hxd2_ray.stages.cost import llm_payload

log = logging.getLogger(__name__)


class Ledger(Protocol):
    def charge(self, payload: list[dict[str, Any]]) -> None: ...

    def exhausted(self) -> str: ...

    def note_skipped(self, batches: int = 1) -> None: ...


class RemoteLedger:
    """A stage actor's view of the job's ledger actor (a Ray actor handle running ``UsageLedger``)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def charge(self, payload: list[dict[str, Any]]) -> None:
        import ray  # noqa: PLC0415 - Ray only inside the job's actors; importing stages loads none

        # Waited for, so that the next batch's budget check (of any actor) already counts this one.
        ray.get(self.handle.charge.remote(payload))

    def exhausted(self) -> str:
        import ray  # noqa: PLC0415 - as above

        return str(ray.get(self.handle.exhausted.remote()))

    def note_skipped(self, batches: int = 1) -> None:
        self.handle.note_skipped.remote(batches)


@dataclass(frozen=True)
class StageRun:
    cache: CacheLocation | None = None  # None: no LLM cache (--no-llm-cache)
    prompt_version: str = ""
    ledger: Ledger | None = None

    def exhausted(self) -> str:
        return self.ledger.exhausted() if self.ledger is not None else ""

    def charge(self, payload: list[dict[str, Any]]) -> None:
        if self.ledger is not None and payload:
            self.ledger.charge(payload)

    def skipped(self) -> None:
        if self.ledger is not None:
            self.ledger.note_skipped(1)


class IndexingLLM:
    """The LLM of an indexing stage: cache (if the run has one) -> meter -> backend."""

    def __init__(self, backend: LLMClient, run: StageRun) -> None:
        self.meter = MeteredLLM(backend)
        self.cached = (
            CachedLLM(self.meter, ResponseStore(run.cache, backend.model_id), run.prompt_version)
            if run.cache is not None
            else None
        )
        self.client: LLMClient = self.cached if self.cached is not None else self.meter
        self.model_id = backend.model_id

    def payload(self, gpus_per_actor: float) -> list[dict[str, Any]]:
        """Ledger rows for what was asked since the last call."""
        by_tag, seconds = self.meter.take()
        hits = self.cached.take_counts()[0] if self.cached is not None else {}
        return llm_payload(by_tag, seconds, hits, self.model_id, gpus_per_actor)


def current_node() -> str:
    """The Ray node id of this process (its hostname outside Ray): where a reported file was written."""
    try:
        import ray  # noqa: PLC0415 - as above

        if ray.is_initialized():
            return str(ray.get_runtime_context().get_node_id())
    except Exception as exc:  # noqa: BLE001 - a label for messages only
        log.warning("could not read this process's Ray node id (%s: %s); naming the host", type(exc).__name__, exc)
    return socket.gethostname()
