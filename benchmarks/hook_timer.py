"""Thread CPU time of the callables otel-spans runs on the event loop, by bucket (and,
with :class:`CallCounter`, the calls made inside them).

Each call is counted once, in its own bucket, for its own time: a wrapped call made
inside another (the metrics tick's poll, a span's discovery inside a transition) is
taken out of the outer call's reading. Garbage collections that start inside a
wrapped call are taken out too and kept in a bucket of their own: a collection costs
what the whole heap holds (Dask's objects, mostly), lands in whichever call allocates
at the wrong moment, and a full one (tens of ms) in one call is most of the spread
between rounds of that call's bucket; reported apart, the buckets keep otel-spans'
own code and the collections its allocations set off are still counted.
"""

from __future__ import annotations

import gc
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

#: The bucket of the collections that started inside a wrapped call.
COLLECTIONS = "loop: collections in otel-spans' calls"


class HookTimer:
    """Wraps callables of one thread (the event loop's) and times them by bucket;
    :meth:`close` removes its garbage-collection callback."""

    def __init__(self) -> None:
        self.ns: dict[str, int] = {COLLECTIONS: 0}
        self.calls: dict[str, int] = {COLLECTIONS: 0}
        self._thread = threading.get_ident()
        #: Per wrapped call under way (innermost last): [its wrapped calls' time, the
        #: collections' time within those].
        self._frames: list[list[int]] = []
        #: [collections' time inside wrapped calls so far, when the current one began].
        self._gc = [0, 0]
        clock = time.thread_time_ns
        pairs = []
        for _ in range(2000):
            t0 = clock()
            pairs.append(clock() - t0)
        #: What one timed call adds to its own reading.
        self.overhead = statistics.median(pairs)
        gc.callbacks.append(self._collection)

    def close(self) -> None:
        if self._collection in gc.callbacks:
            gc.callbacks.remove(self._collection)

    def _collection(self, phase: str, info: dict[str, int]) -> None:
        if not self._frames or threading.get_ident() != self._thread:
            return
        if phase == "start":
            self._gc[1] = time.thread_time_ns()
        else:
            self._gc[0] += time.thread_time_ns() - self._gc[1]
            self.calls[COLLECTIONS] += 1

    def wrap(self, bucket: str, function: Callable[..., Any]) -> Callable[..., Any]:
        clock = time.thread_time_ns
        self.ns.setdefault(bucket, 0)
        self.calls.setdefault(bucket, 0)
        ns, calls, frames, collected = self.ns, self.calls, self._frames, self._gc

        def timed(*args: Any, **kwargs: Any) -> Any:
            frames.append([0, 0])
            gc0 = collected[0]
            t0 = clock()
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = clock() - t0
                in_gc = collected[0] - gc0
                inner, inner_gc = frames.pop()
                ns[bucket] += elapsed - inner - (in_gc - inner_gc)
                calls[bucket] += 1
                if frames:
                    frames[-1][0] += elapsed
                    frames[-1][1] += in_gc

        return timed

    def reading(self) -> dict[str, float]:
        """Seconds by bucket, each call's timer cost taken out."""
        out = {
            b: (self.ns[b] - self.calls[b] * self.overhead) / 1e9
            for b in self.ns
            if b != COLLECTIONS
        }
        out[COLLECTIONS] = self._gc[0] / 1e9
        return out


class CallCounter:
    """The Python and C calls made inside wrapped callables of this thread, by bucket:
    :class:`HookTimer`'s buckets, counted instead of timed.

    A call's CPU time is what the caches hold when it runs, and the machine's speed
    moves it between runs by more than a cut of a few µs; a count of calls is the same
    on any machine, for the same code and workload. It is a count of work, not of time
    (one call of ``len`` counts as much as one export), so it compares versions of the
    code, never costs. Every call counts for the innermost wrapped callable under way,
    the callable itself included, the wrapper's own calls taken out. Only this thread
    is followed (``sys.setprofile``): the exporter threads are not counted.
    """

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        #: Calls of the wrappers themselves, counted by the profile, taken out.
        self._own: dict[str, int] = {}
        self._stack: list[str] = []
        if sys.getprofile() is not None:
            # One profile function per thread: a second counter (or a profiler) would
            # silently take the first one's place, and it would stop counting.
            raise RuntimeError("a profile function is set already: one CallCounter per thread")
        sys.setprofile(self._profile)

    def close(self) -> None:
        sys.setprofile(None)

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if self._stack and (event == "call" or event == "c_call"):
            self.calls[self._stack[-1]] += 1

    def wrap(self, bucket: str, function: Callable[..., Any]) -> Callable[..., Any]:
        self.calls.setdefault(bucket, 0)
        self._own.setdefault(bucket, 0)
        stack, own = self._stack, self._own

        def counted(*args: Any, **kwargs: Any) -> Any:
            if stack:  # counted for the outer bucket: this wrapper's call and the append
                own[stack[-1]] += 2
            stack.append(bucket)
            own[bucket] += 1  # the pop below
            try:
                return function(*args, **kwargs)
            finally:
                stack.pop()

        return counted

    def reading(self) -> dict[str, int]:
        """Calls by bucket."""
        return {b: self.calls[b] - self._own[b] for b in self.calls}


class Collections:
    """CPU time of every garbage collection in the process while open, any thread,
    and how many of each generation: the variants' collections side by side tell what
    otel-spans' allocations cost the whole process, wherever the collections landed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.by_generation = [0, 0, 0]
        self.seconds_by_generation = [0.0, 0.0, 0.0]
        self._started: dict[int, float] = {}
        gc.callbacks.append(self._collection)

    def close(self) -> None:
        if self._collection in gc.callbacks:
            gc.callbacks.remove(self._collection)

    def _collection(self, phase: str, info: dict[str, int]) -> None:
        thread = threading.get_ident()
        if phase == "start":
            self._started[thread] = time.thread_time()
        elif thread in self._started:
            took = time.thread_time() - self._started.pop(thread)
            self.seconds += took
            self.by_generation[info["generation"]] += 1
            self.seconds_by_generation[info["generation"]] += took
