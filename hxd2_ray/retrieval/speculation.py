"""A generator started ahead of the decision that says whether its output is wanted.

Under ``multistage.overlap_steps`` the answer from the logic form's evidence is generated while the pre-check
verifier is still deciding whether that evidence supports one: YES (the common case) finds the answer already
under way, so the verifier's round trip is no longer on the critical path; NO abandons it and nothing of it is
sent. The generator runs in a worker thread from the moment it is created and buffers what it yields;
:meth:`BackgroundGenerator.replay` yields the buffered items and then the live ones, and returns the generator's
return value (or raises its exception) exactly as iterating it directly would.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from concurrent.futures import Executor
from typing import Any, Callable, Generator, Generic, TypeVar

Y = TypeVar("Y")
R = TypeVar("R")

_ITEM, _RETURN, _RAISE = "item", "return", "raise"


class BackgroundGenerator(Generic[Y, R]):
    """Runs ``make()``'s generator in ``pool`` from now on; see the module docstring."""

    def __init__(self, pool: Executor, make: Callable[[], Generator[Y, None, R]]):
        self._items: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._stop = threading.Event()
        self._replayed = False
        # The caller's context (a Serve request's deadline and cancellation) follows the work.
        pool.submit(contextvars.copy_context().run, self._pump, make)

    def _pump(self, make: Callable[[], Generator[Y, None, R]]) -> None:
        try:
            gen = make()
            try:
                while not self._stop.is_set():
                    try:
                        item = next(gen)
                    except StopIteration as stop:
                        self._items.put((_RETURN, stop.value))
                        return
                    self._items.put((_ITEM, item))
            finally:
                gen.close()  # abandoned: closing a streaming call cancels it downstream
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            self._items.put((_RAISE, exc))

    def replay(self) -> Generator[Y, None, R]:
        """Everything the generator yields, then its return value (once; raises what it raised)."""
        if self._replayed:
            raise RuntimeError("a background generator can be replayed once")
        self._replayed = True
        while True:
            kind, value = self._items.get()
            if kind == _ITEM:
                yield value
            elif kind == _RETURN:
                return value
            else:
                raise value

    def abandon(self) -> None:
        """Not wanted after all: the worker stops before its next item (a running call finishes first)."""
        self._stop.set()
