"""Admission at the Ingress: refuse at once, with a 503 and ``Retry-After``, a query that would not finish before
its deadline, instead of queueing it to answer 504 later (issue 33).

What a query will take depends on how many are in flight: the Retriever runs a few at once and queues the rest.
Each Ingress replica keeps, for its own recent answers, how many queries it had in flight when each was sent and
how long it took. A new query's time is predicted from the answers sent at about the same load (its own in-flight
count, give or take a quarter); with too few of them there is no evidence and the query is admitted. Above every
load seen so far, the time grows in proportion to the queue ahead, from the answers at the highest load seen, but
only once those show queueing (they took longer than the answers at the lowest load): below saturation, more in
flight does not mean slower. A query is refused only for the load: when its predicted time would use more than
half of what its deadline leaves and shows queueing (half as long again as an answer at the lowest load).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator

# Answers remembered (per Ingress replica), and how many of them must be near a load to predict from them.
WINDOW = 256
MIN_SAMPLES = 5
# The answers at the highest load show queueing when they took this much longer than those at the lowest.
QUEUEING_RATIO = 1.5
# ... and at least this much longer in seconds (answers of a millisecond differ by noise, not by a queue).
QUEUEING_MIN_S = 0.1
# A query is admitted when its predicted time is within this share of what its deadline leaves: the prediction is
# a median, so one predicted to take just its deadline misses it half the time, and a miss costs the work it did.
# At twice the capacity for 60 s (tests/integration/test_serve_overload.py): 0.7 kept 54% of the capacity as
# goodput (297 of 1706 queries 504), 0.5 kept 66% (109 504s).
DEADLINE_SHARE = 0.5


@dataclass(frozen=True)
class Refusal:
    """Why a query is refused: its predicted time against the time its deadline leaves."""

    predicted_s: float
    remaining_s: float
    in_flight: int

    @property
    def retry_after_s(self) -> int:
        """Seconds until the queue ahead of it has likely drained: what it lacked, at least 1, at most 60."""
        return max(1, min(60, math.ceil(self.predicted_s - self.remaining_s)))

    @property
    def message(self) -> str:
        return (
            f"the service is overloaded: with {self.in_flight} queries in flight an answer takes about "
            f"{self.predicted_s:.1f} s, more than the {max(0.0, self.remaining_s):.1f} s the deadline leaves"
        )


class Admission:
    """Predicts a query's time from this replica's recent answers and refuses one that would miss its deadline."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, window: int = WINDOW):
        self.clock = clock
        self.in_flight = 0
        self._answers: deque[tuple[int, float]] = deque(maxlen=window)  # (in flight when sent, seconds)

    def predicted_s(self, in_flight: int) -> float | None:
        """Seconds a query sent with ``in_flight`` others outstanding is likely to take; None without evidence."""
        if len(self._answers) < MIN_SAMPLES:
            return None
        spread = max(2, in_flight // 4)
        near = [s for n, s in self._answers if abs(n - in_flight) <= spread]
        if len(near) >= MIN_SAMPLES:
            return statistics.median(near)
        by_load = sorted(self._answers)
        highest, lowest = by_load[-MIN_SAMPLES:], by_load[:MIN_SAMPLES]
        top_load = highest[0][0]
        if in_flight <= top_load:
            return None  # between loads seen, without enough answers near this one
        slow, fast = statistics.median(s for _, s in highest), statistics.median(s for _, s in lowest)
        if slow < QUEUEING_RATIO * fast:
            return None  # no queueing seen yet: more in flight may still run at once
        return slow * (in_flight + 1) / (top_load + 1)

    def baseline_s(self) -> float | None:
        """What an answer takes at the lowest load seen (the median of the answers sent with the fewest in flight)."""
        if len(self._answers) < MIN_SAMPLES:
            return None
        return statistics.median(s for _, s in sorted(self._answers)[:MIN_SAMPLES])

    def check(self, deadline: float, now: float | None = None) -> Refusal | None:
        """A :class:`Refusal` when a query with this wall-clock ``deadline`` would not finish in time because of
        the load (its predicted time shows queueing); else None. A deadline shorter than an answer takes on an
        idle service is not overload: that query is admitted and ends 504 at its deadline."""
        if self.in_flight == 0:
            return None  # nothing ahead of it: whatever its deadline, load is not the reason it would miss it
        remaining = deadline - (time.time() if now is None else now)
        predicted, baseline = self.predicted_s(self.in_flight), self.baseline_s()
        if predicted is None or baseline is None or predicted <= DEADLINE_SHARE * remaining:
            return None
        if predicted < max(QUEUEING_RATIO * baseline, baseline + QUEUEING_MIN_S):
            return None
        return Refusal(predicted_s=predicted, remaining_s=remaining, in_flight=self.in_flight)

    @contextlib.contextmanager
    def admitted(self) -> Iterator[Callable[[], None]]:
        """Counts the query as in flight for the block; calling what it yields records its time. Answers count, and
        so do queries that ran out of time (what they took is less than an answer would have taken: without them
        the evidence under overload would be only the lucky ones); other errors say nothing of an answer's time."""
        sent_with = self.in_flight
        started = self.clock()
        self.in_flight += 1

        def answered() -> None:
            self._answers.append((sent_with, self.clock() - started))

        try:
            yield answered
        finally:
            self.in_flight -= 1
