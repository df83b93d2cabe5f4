"""An index that follows its published generations, for readers that live longer than one change (Serve replicas).

:func:`~hxd2_ray.retrieval.index.open_index` reads the generation the manifest names when it is called and keeps
reading it. A :class:`LiveIndex` polls the manifest (every ``poll_s``, and on :meth:`LiveIndex.refresh`); when a
change publishes a new generation it opens it beside the one in use, with whatever the reader builds on an open
index (``attach``: a query pipeline, a plan executor), and then moves new requests to it. A request pins one
generation for its whole life (:meth:`LiveIndex.pin`): requests in flight finish on the generation they started
on, and a request pinned elsewhere (by the deployment that took it) is answered from that same generation, opened
on demand, so no request reads two generations. A generation nobody pins any more and that is not current is
closed. While a generation is open this process holds a lease on it (:mod:`hxd2_ray.index_store.leases`), so the
index job's pruning never removes it from under a request.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from hxd2_ray.config import HxdConfig
from hxd2_ray.index_store.leases import LeaseKeeper
from hxd2_ray.index_store.manifest import read_manifest
from hxd2_ray.ingest.sources import resolve_filesystem
from hxd2_ray.retrieval.index import OpenIndex, open_index

log = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_POLL_S = 2.0


@dataclass
class _Held(Generic[T]):
    generation: str
    index: OpenIndex
    value: T
    lease: Any
    pins: int = 0


@dataclass(frozen=True)
class Pinned(Generic[T]):
    """The generation a request reads, its open index and what the reader built on it."""

    generation: str
    index: OpenIndex
    value: T


@dataclass
class _Switch:
    generation: str = ""
    error: str = ""
    listeners: list[Callable[[str], None]] = field(default_factory=list)


class LiveIndex(Generic[T]):
    """The index at ``location``, following its current generation (see the module docstring)."""

    def __init__(
        self,
        location: str,
        cfg: HxdConfig,
        attach: Callable[[OpenIndex], T],
        *,
        poll_s: float = DEFAULT_POLL_S,
        keeper: LeaseKeeper | None = None,
        opener: Callable[..., OpenIndex] = open_index,
        detach: Callable[[T], None] | None = None,
    ):
        self.location = location
        self.cfg = cfg
        self.poll_s = poll_s
        self._attach = attach
        self._detach = detach
        self._opener = opener
        self._own_keeper = keeper is None
        self._keeper = keeper or LeaseKeeper()
        self._fs, self._root = resolve_filesystem(location, cfg.s3)
        self._lock = threading.Lock()
        self._opening = threading.Lock()  # one generation opened at a time
        self._held: dict[str, _Held[T]] = {}
        self._stop = threading.Event()
        self.switch = _Switch()
        first = self._open(None)
        self._current = first.generation
        self._poller: threading.Thread | None = None
        if poll_s > 0:
            self._poller = threading.Thread(target=self._poll_loop, name="hxd2-live-index", daemon=True)
            self._poller.start()

    # -- reading ----------------------------------------------------------------------------------------

    @property
    def generation(self) -> str:
        """The generation new requests read."""
        return self._current

    def current(self) -> Pinned[T]:
        """The current generation without pinning it (for reads that need no consistency across calls)."""
        with self._lock:
            held = self._held[self._current]
        return Pinned(held.generation, held.index, held.value)

    @contextlib.contextmanager
    def pin(self, generation: str | None = None) -> Iterator[Pinned[T]]:
        """Read one generation for the block: the current one, or ``generation`` (opened if this process has it
        closed: a request another deployment pinned before this one switched)."""
        held = self._acquire(generation)
        try:
            yield Pinned(held.generation, held.index, held.value)
        finally:
            self._release(held)

    def _acquire(self, generation: str | None) -> _Held[T]:
        with self._lock:
            wanted = self._current if generation is None else generation
            held = self._held.get(wanted)
            if held is not None:
                held.pins += 1
                return held
        opened = self._open(wanted)
        with self._lock:
            opened.pins += 1
            return opened

    def _release(self, held: _Held[T]) -> None:
        with self._lock:
            held.pins -= 1
            retire = held.pins == 0 and held.generation != self._current
            if retire:
                self._held.pop(held.generation, None)
        if retire:
            self._close(held)

    # -- following the manifest ------------------------------------------------------------------------

    def refresh(self) -> str:
        """Read the manifest now; open and switch to a newly published generation. Returns the current one."""
        manifest = read_manifest(self._root, filesystem=self._fs)
        if manifest.generation == self._current:
            return self._current
        fresh = self._open(manifest.generation)
        with self._lock:
            old = self._held.get(self._current)
            self._current = fresh.generation
            retire = old is not None and old.pins == 0 and old.generation != fresh.generation
            if retire and old is not None:
                self._held.pop(old.generation, None)
        log.info(
            "index %s: serving generation %s (was %s)", self.location, fresh.generation, old.generation if old else "-"
        )
        self.switch.generation, self.switch.error = fresh.generation, ""
        for listener in list(self.switch.listeners):
            listener(fresh.generation)
        if retire and old is not None:
            self._close(old)
        return fresh.generation

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.refresh()
            except Exception as exc:  # noqa: BLE001 - a half-published or unreadable change: keep serving, retry
                if str(exc) != self.switch.error:
                    log.warning("index %s: staying on generation %s: %s", self.location, self._current, exc)
                self.switch.error = str(exc)

    # -- open / close ------------------------------------------------------------------------------------

    def _open(self, generation: str | None) -> _Held[T]:
        with self._opening:
            if generation is not None:
                with self._lock:
                    if generation in self._held:
                        return self._held[generation]
            index = self._opener(self.location, self.cfg, generation=generation)
            try:
                value = self._attach(index)
            except BaseException:
                index.close()
                raise
            held = _Held(
                index.manifest.generation,
                index,
                value,
                self._keeper.hold(self._fs, self._root, index.manifest.generation),
            )
            with self._lock:
                self._held[held.generation] = held
            return held

    def _close(self, held: _Held[T]) -> None:
        try:
            if self._detach is not None:
                self._detach(held.value)
            held.index.close()
        finally:
            self._keeper.drop(held.lease)

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for h in held:
            try:
                self._close(h)
            except Exception as exc:  # noqa: BLE001 - one that fails to close does not keep the others open
                log.warning(
                    "index %s: closing generation %s failed: %s: %s",
                    self.location,
                    h.generation,
                    type(exc).__name__,
                    exc,
                )
        if self._own_keeper:
            self._keeper.close()

    def open_generations(self) -> dict[str, int]:
        """generation -> requests pinned to it now (the current one and those still finishing)."""
        with self._lock:
            return {g: h.pins for g, h in self._held.items()}
