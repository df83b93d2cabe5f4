"""BackgroundGenerator: a generator run ahead in a thread replays exactly as iterating it would, and stops when
abandoned."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Generator

import pytest

from hxd2_ray.retrieval.speculation import BackgroundGenerator


@pytest.fixture
def pool():
    with ThreadPoolExecutor(max_workers=2) as p:
        yield p


def counted(n: int, closed: threading.Event | None = None) -> Generator[int, None, str]:
    try:
        for i in range(n):
            yield i
        return f"done {n}"
    finally:
        if closed is not None:
            closed.set()


def test_replay_yields_the_items_then_returns_the_value(pool):
    ahead = BackgroundGenerator(pool, lambda: counted(3))
    items = []
    replay = ahead.replay()
    while True:
        try:
            items.append(next(replay))
        except StopIteration as stop:
            assert stop.value == "done 3"
            break
    assert items == [0, 1, 2]
    with pytest.raises(RuntimeError, match="once"):
        next(ahead.replay())


def test_an_exception_is_raised_where_it_would_have_been(pool):
    def failing() -> Generator[int, None, None]:
        yield 1
        raise ValueError("broken stream")

    replay = BackgroundGenerator(pool, failing).replay()
    assert next(replay) == 1
    with pytest.raises(ValueError, match="broken stream"):
        next(replay)


def test_abandon_stops_the_generator_at_its_next_item(pool):
    gate = threading.Event()
    closed = threading.Event()
    produced: list[int] = []

    def slow() -> Generator[int, None, None]:
        try:
            for i in range(1000):
                gate.wait(timeout=5)
                produced.append(i)
                yield i
        finally:
            closed.set()

    ahead = BackgroundGenerator(pool, slow)
    ahead.abandon()
    gate.set()
    assert closed.wait(timeout=5)  # closed, so a streaming call would be cancelled downstream
    assert len(produced) <= 1
