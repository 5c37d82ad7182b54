"""How late a 10 ms timer fires on an event loop: the loop's responsiveness, measured.

Used by the overhead benchmark (the scheduler's loop runs in a thread of a
LocalCluster) and by the fault tests (the scheduler runs on the test's own loop).
"""

from __future__ import annotations

import asyncio


class LoopLag:
    """Samples the lateness of a timer re-armed every 10 ms while the block runs.

    A late timer means the loop was busy with something else when it should have
    fired: that is the latency every message to the scheduler sees too. The loop may
    run in another thread (arming is thread-safe) or be the caller's own.
    """

    INTERVAL = 0.01

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.lags: list[float] = []
        self.running = False

    def _arm(self) -> None:
        self.loop.call_later(self.INTERVAL, self._tick, self.loop.time() + self.INTERVAL)

    def _tick(self, due: float) -> None:
        self.lags.append(self.loop.time() - due)
        if self.running:
            self._arm()

    def __enter__(self) -> LoopLag:
        self.running = True
        self.loop.call_soon_threadsafe(self._arm)
        return self

    def __exit__(self, *exc: object) -> None:
        self.running = False

    def p99(self) -> float:
        """The 99th percentile lateness in seconds (0 when nothing was sampled)."""
        if not self.lags:
            return 0.0
        ordered = sorted(self.lags)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
