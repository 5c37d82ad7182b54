"""The per-span benchmark's timer counts each call once, in its own bucket, and keeps
the garbage collections that start inside a call apart: the benchmark's split (per
task, per span, collections) is only as true as this accounting."""

from __future__ import annotations

import gc
import sys
import time

import pytest

from benchmarks.hook_timer import COLLECTIONS, CallCounter, Collections, HookTimer


def spin(seconds: float) -> float:
    """Burn ``seconds`` of this thread's CPU; what it burned."""
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass
    return time.thread_time() - start


def test_an_inner_call_and_a_collection_are_counted_once_in_their_own_buckets() -> None:
    timer = HookTimer()
    burned: dict[str, float] = {}
    heap = [[i] for i in range(300_000)]  # a collection of these takes milliseconds

    def inner() -> None:
        burned["inner"] = spin(0.02)
        t0 = time.thread_time()
        gc.collect()
        burned["collection"] = time.thread_time() - t0

    def outer() -> None:
        burned["outer"] = spin(0.02)
        timed_inner()
        burned["outer"] += spin(0.02)

    timed_inner = timer.wrap("inner", inner)
    timed_outer = timer.wrap("outer", outer)
    try:
        timed_outer()
    finally:
        timer.close()
    assert timer._collection not in gc.callbacks
    reading = timer.reading()
    slack = 0.004  # the clock's reads and the spin loop's last lap
    assert burned["collection"] > 0.002, burned
    assert abs(reading["outer"] - burned["outer"]) < slack, (reading, burned)
    assert abs(reading["inner"] - burned["inner"]) < slack, (reading, burned)
    assert abs(reading[COLLECTIONS] - burned["collection"]) < slack, (reading, burned)
    assert timer.calls == {COLLECTIONS: 1, "inner": 1, "outer": 1}
    del heap


def test_a_collection_outside_the_wrapped_calls_is_not_counted() -> None:
    timer = HookTimer()
    try:
        gc.collect()
        timer.wrap("hook", lambda: None)()
    finally:
        timer.close()
    assert timer.calls[COLLECTIONS] == 0
    assert timer.reading()[COLLECTIONS] == 0.0


def test_every_collection_while_open_is_counted_by_generation() -> None:
    collections = Collections()
    try:
        gc.collect()
        gc.collect(0)
    finally:
        collections.close()
    gc.collect()  # after close: not counted
    assert collections.by_generation == [1, 0, 1]
    assert collections.seconds > 0


def test_calls_are_counted_for_the_innermost_wrapped_callable() -> None:
    """``--calls``: each call made inside a wrapped callable counts once, for the
    innermost one under way, the callable itself included and the wrappers' own calls
    left out; calls outside every wrapped callable do not count."""

    def leaf() -> None:
        pass

    def inner() -> None:
        leaf()
        len(())  # a C call counts as one too

    def outer() -> None:
        wrapped_inner()
        leaf()

    counter = CallCounter()
    try:
        wrapped_inner = counter.wrap("inner", inner)
        wrapped_outer = counter.wrap("outer", outer)
        wrapped_outer()
        wrapped_inner()
        leaf()  # outside: not counted
    finally:
        counter.close()
    assert counter.reading() == {"inner": 2 * 3, "outer": 2}
    assert sys.getprofile() is None


def test_a_second_call_counter_on_a_thread_is_refused() -> None:
    """``sys.setprofile`` holds one function per thread: a second counter would end the
    first one's counting without a word."""
    counter = CallCounter()
    try:
        with pytest.raises(RuntimeError, match="one CallCounter per thread"):
            CallCounter()
    finally:
        counter.close()
    assert sys.getprofile() is None
