"""Admission at the Ingress: refuse at once, with a 503 and ``Retry-After``, a query that would not finish before
its deadline, instead of queueing it to answer 504 later (issue 33).

What a query will take depends on how many are in flight: the Retriever runs a few at once and queues the rest.
Each Ingress replica keeps, for each load (how many queries it had in flight when one was sent), how long its
recent answers at that load took. A new query's time is predicted from the answers sent at about the same load
(its own in-flight count, give or take a quarter); with too few of them there is no evidence and the query is
admitted. Above every load seen so far, the time grows in proportion to the queue ahead, from the answers at the
highest load seen, but only once those show queueing (they took longer than the answers at the lowest load):
below saturation, more in flight does not mean slower. A query is refused only for the load: when its predicted
time would use more than half of what its deadline leaves and shows queueing (half as long again as an answer at
the lowest load).

Answers are kept per load, not in one window of the latest: under a long overload the latest answers are all at
high loads, and a window of them forgot what an answer takes on a light load, so the queueing test compared the
queue with itself and admitted more than the service could answer (at twice the capacity for 60 s: 388 of 1,117
admitted queries ran out of time). Predictions use only the answers of the last ``FRESH_S`` seconds (the light
load's time, the baseline, is kept however old): a load refused on old evidence is never admitted to renew it, so
after an outage (a replica lost, each answer at its deadline) old evidence would refuse that load for ever.

Nor does a prediction count for more than the load can explain: with ``n`` queries in flight, a new one waits at
most for those ``n`` run one after another, ``(n + 1)`` answers at the lowest load's time. Answers slower than that
were slowed by something else, most often an outage (a replica being replaced: the answers sent meanwhile waited
for it). Refusing on them refused a light load that the service, back again, answered in 0.6 s: in the overload
test's app, once a killed Retriever was replaced, queries sent with 1 in flight were refused for 6 s on the
outage's 8.9 s answers. Under a real overload the queue is long and the bound far above the evidence.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

# Answers remembered per load (per Ingress replica), and how many of them must be near a load to predict from them.
PER_LOAD = 32
# Answers older than this do not predict (the service may have changed since: a replica came back).
FRESH_S = 10.0
MIN_SAMPLES = 5
# The answers at the highest load show queueing when they took this much longer than those at the lowest.
QUEUEING_RATIO = 1.5
# ... and at least this much longer in seconds (answers of a millisecond differ by noise, not by a queue).
QUEUEING_MIN_S = 0.1
# A query is admitted when its predicted time is within this share of what its deadline leaves: the prediction is
# a median, so one predicted to take just its deadline misses it half the time, and a miss costs the work it did.
# At twice the capacity for 60 s (tests/integration/test_serve_overload.py), with the answers per load and the
# queue in the Retriever replica: 107% of the capacity measured unloaded as goodput, no 504.
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
            f"{self.predicted_s:.1f} s, more than half of the {max(0.0, self.remaining_s):.1f} s the deadline leaves"
        )


class Admission:
    """Predicts a query's time from this replica's recent answers and refuses one that would miss its deadline."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, per_load: int = PER_LOAD, fresh_s: float = FRESH_S):
        self.clock = clock
        self.in_flight = 0
        self._per_load = per_load
        self._fresh_s = fresh_s
        # in flight when sent -> the latest answers at that load: (when it ended, seconds it took)
        self._by_load: dict[int, deque[tuple[float, float]]] = {}

    def _answers(self) -> int:
        return sum(len(times) for times in self._by_load.values())

    def _times(self, load: int, since: float | None) -> list[float]:
        return [s for ended, s in self._by_load.get(load, ()) if since is None or ended >= since]

    def _gathered(self, loads: Iterable[int], since: float | None) -> tuple[list[float], int | None]:
        """The answers at ``loads`` (ended after ``since``), taken in that order until there are enough; and the
        last load taken."""
        times: list[float] = []
        last = None
        for load in loads:
            found = self._times(load, since)
            if found:
                times.extend(found)
                last = load
                if len(times) >= MIN_SAMPLES:
                    break
        return times, last

    def predicted_s(self, in_flight: int) -> float | None:
        """Seconds a query sent with ``in_flight`` others outstanding is likely to take; None without evidence."""
        if self._answers() < MIN_SAMPLES:
            return None
        since = self.clock() - self._fresh_s
        spread = max(2, in_flight // 4)
        near = [
            t for load in range(max(0, in_flight - spread), in_flight + spread + 1) for t in self._times(load, since)
        ]
        if len(near) >= MIN_SAMPLES:
            return statistics.median(near)
        highest, top_load = self._gathered(sorted(self._by_load, reverse=True), since)
        if top_load is None or in_flight <= top_load or len(highest) < MIN_SAMPLES:
            return None  # between loads seen, without enough answers near this one
        slow, fast = statistics.median(highest), self.baseline_s()
        if fast is None or slow < QUEUEING_RATIO * fast:
            return None  # no queueing seen yet: more in flight may still run at once
        return slow * (in_flight + 1) / (top_load + 1)

    def baseline_s(self) -> float | None:
        """What an answer takes at the lowest load seen (the median of the answers sent with the fewest in flight)."""
        if self._answers() < MIN_SAMPLES:
            return None
        lowest, _ = self._gathered(sorted(self._by_load), since=None)
        return statistics.median(lowest)

    def check(self, deadline: float, now: float | None = None) -> Refusal | None:
        """A :class:`Refusal` when a query with this wall-clock ``deadline`` would not finish in time because of
        the load (its predicted time shows queueing); else None. A deadline shorter than an answer takes on an
        idle service is not overload: that query is admitted and ends 504 at its deadline."""
        if self.in_flight == 0:
            return None  # nothing ahead of it: whatever its deadline, load is not the reason it would miss it
        remaining = deadline - (time.time() if now is None else now)
        predicted, baseline = self.predicted_s(self.in_flight), self.baseline_s()
        if predicted is None or baseline is None:
            return None
        predicted = min(predicted, (self.in_flight + 1) * baseline)  # what the load can explain
        if predicted <= DEADLINE_SHARE * remaining:
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
            times = self._by_load.get(sent_with)
            if times is None:
                times = self._by_load[sent_with] = deque(maxlen=self._per_load)
            ended = self.clock()
            times.append((ended, ended - started))

        try:
            yield answered
        finally:
            self.in_flight -= 1
