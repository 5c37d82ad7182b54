"""Each worker's clock offset, so that task spans use the clock their task code uses.

A worker reports its tasks' phases (``startstops``: compute, transfer...) shifted by its
``Worker.scheduler_delay``: its estimate, refreshed at every heartbeat, of how far the
scheduler's clock is ahead of its own. The spans task code starts keep the worker's own
clock (the OTel SDK reads ``time.time_ns()``). Exported as reported, a task span and the
spans its code started disagree by the estimate's error: on one host, where both clocks
are the same clock, a few ms, enough for a child to sit outside its parent.

So the worker preload tells the scheduler the delay it applies, in a Dask event of topic
:data:`~otel_spans.semconv.CLOCK_EVENT_TOPIC` (``{"delay": seconds}``, sent from the
worker's event loop before the first task it runs with a new value: it reaches the
scheduler ahead of that task's result, on the same ordered stream), and the scheduler
subtracts it again: a task's phases, its span and its group's span are exported on the
clock of the worker that ran the task (:mod:`otel_spans.scheduler.task_groups`). A
worker without the preload reports nothing; its tasks stay on the scheduler's clock.
"""

from __future__ import annotations

import math

#: Most workers whose offset is remembered (the least recently reported is forgotten
#: first, counted in :attr:`WorkerClocks.evicted`; its tasks fall back to offset 0).
_MAX_WORKERS = 10_000


class WorkerClocks:
    """The latest ``scheduler_delay`` each worker reported, by worker address."""

    def __init__(self) -> None:
        #: Worker address -> seconds the scheduler's clock is ahead of the worker's, as
        #: the worker last estimated it (can be negative; changes at every heartbeat).
        #: At most ``_MAX_WORKERS``, least recently reported first.
        self._offsets: dict[str, float] = {}
        #: Offsets forgotten at ``_MAX_WORKERS``.
        self.evicted = 0

    def reported(self, msg: object) -> None:
        """A clock event (``{"delay": seconds, "worker": address}``, the address added
        by the scheduler); anything else is ignored: this is worker input."""
        if not isinstance(msg, dict):
            return
        worker, delay = msg.get("worker"), msg.get("delay")
        if not isinstance(worker, str) or not isinstance(delay, int | float):
            return
        if isinstance(delay, bool) or not math.isfinite(delay):
            return
        self._offsets.pop(worker, None)
        self._offsets[worker] = float(delay)
        if len(self._offsets) > _MAX_WORKERS:
            del self._offsets[next(iter(self._offsets))]
            self.evicted += 1

    def offset(self, worker: object) -> float:
        """Seconds to subtract from what ``worker`` reported (0 when it never said)."""
        return self._offsets.get(worker, 0.0) if isinstance(worker, str) else 0.0

    def __len__(self) -> int:
        return len(self._offsets)
