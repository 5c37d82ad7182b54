"""Fetching finished workflows' hot code from the workers (``otel-spans.profile``, off by
default).

Workers already sample their task threads (``distributed.worker.profile``, every 10 ms)
and keep one call tree per task prefix and profile cycle (1 s) for the last thousand
cycles. When a workflow's root Dask span is exported done, :class:`WorkflowProfiles`
picks its busiest prefixes by compute time (O(its task groups), on the event loop) and
asks the workers, through the scheduler's own ``get_profile``, for each prefix's tree
over the workflow's time window. The requests run one at a time in one background task,
so a burst of finished workflows never floods the workers; the replies go to the logs
pipeline as they are, and are folded on its exporter thread.

The profile of a prefix is the worker's, not the workflow's: tasks of the same prefix
that another workflow ran in the same window are in it too.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dask.config
from dask.utils import parse_timedelta
from distributed.metrics import time

from otel_spans.config import ProfileSettings
from otel_spans.names import clean
from otel_spans.records import ProfileRecord, ns
from otel_spans.telemetry.signals import Signals

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.spans import Span

logger = logging.getLogger("otel_spans")

#: Workflows waiting for their profiles; one more is dropped (and counted).
MAX_WAITING = 16
#: Seconds one prefix's fetch may take (the slowest worker's reply).
FETCH_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class _Wanted:
    """What one finished workflow's profiles need: plain values, no live Span."""

    trace_id: int
    span_id: int
    dask_span_id: str
    tags: tuple[str, ...]
    start: float
    stop: float
    prefixes: tuple[str, ...]


def profile_cycle() -> float:
    """Seconds per profile cycle of the workers (as configured here; workers normally
    share the scheduler's configuration)."""
    value = dask.config.get("distributed.worker.profile.cycle", "1000ms")
    return parse_timedelta(value, default="ms") or 1.0


def busiest_prefixes(root: Span, limit: int) -> tuple[str, ...]:
    """The ``limit`` task prefixes of ``root``'s tree with the most compute time."""
    compute: dict[str, float] = {}
    for tg in root.traverse_groups():
        name = tg.prefix.name
        compute[name] = compute.get(name, 0.0) + tg.all_durations.get("compute", 0.0)
    ranked = sorted((c, name) for name, c in compute.items() if c > 0)
    return tuple(name for _, name in reversed(ranked[-limit:]))


class WorkflowProfiles:
    """Fetches the profiles of finished workflows, one request at a time, off the loop's
    critical path; every workflow or prefix not profiled is counted."""

    def __init__(self, scheduler: Scheduler, settings: ProfileSettings, signals: Signals):
        self._scheduler = scheduler
        self._settings = settings
        self._signals = signals
        self._waiting: deque[_Wanted] = deque()
        #: The workflow whose profiles are being fetched.
        self._fetching: _Wanted | None = None
        #: Its prefixes not fetched yet, the one in flight included (counted as failed
        #: when the fetch is cut short).
        self._unfetched = 0
        self._task: asyncio.Task[None] | None = None
        #: Prefix profiles handed to the logs pipeline / not fetched (error, timeout,
        #: closing) / workflows dropped because MAX_WAITING were waiting.
        self.exported = 0
        self.failed = 0
        self.dropped = 0

    def stats(self) -> dict[str, int]:
        return {
            "exported": self.exported,
            "failed": self.failed,
            "dropped": self.dropped,
            "waiting": len(self._waiting) + (self._fetching is not None),
        }

    def workflow_finished(
        self, root: Span, trace_id: int, span_id: int, start: float, stop: float
    ) -> None:
        """A root was exported done (event loop): queue its busiest prefixes over the
        export's window (a continuation's covers only its new work)."""
        prefixes = busiest_prefixes(root, self._settings.prefixes)
        if not prefixes:
            return
        if len(self._waiting) >= MAX_WAITING:
            self.dropped += 1
            return
        self._waiting.append(
            _Wanted(
                trace_id,
                span_id,
                root.id,
                tuple(clean(str(tag)) for tag in root.name),
                start,
                stop,
                prefixes,
            )
        )
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self._waiting:
                self._fetching = wanted = self._waiting.popleft()
                self._unfetched = len(wanted.prefixes)
                await self._fetch_all(wanted)
        except asyncio.CancelledError:
            self._cut_short()
            raise
        finally:
            self._fetching = None

    async def _fetch_all(self, wanted: _Wanted) -> None:
        # A worker answers from its finished profile cycles only (and with nothing at
        # all while none is finished since ``start``): wait out the cycle that holds the
        # workflow's end.
        delay = wanted.stop + profile_cycle() + 0.1 - time()
        if delay > 0:
            await asyncio.sleep(delay)
        for prefix in wanted.prefixes:
            await self._fetch(wanted, prefix)

    async def _fetch(self, wanted: _Wanted, prefix: str) -> None:
        try:
            replies = await asyncio.wait_for(
                self._scheduler.get_profile(
                    start=wanted.start, stop=wanted.stop, key=prefix, merge_workers=False
                ),
                FETCH_TIMEOUT,
            )
        except Exception as e:  # a worker gone mid-call, a timeout: this prefix only
            self._unfetched -= 1
            self.failed += 1
            logger.debug("otel-spans: profile of %r not fetched: %r", prefix, e)
            return
        self._unfetched -= 1
        record = ProfileRecord(
            time_ns=ns(wanted.stop),
            trace_id=wanted.trace_id,
            span_id=wanted.span_id,
            dask_span_id=wanted.dask_span_id,
            tags=wanted.tags,
            prefix=clean(prefix),
            trees=tuple(replies.values()),
        )
        if self._signals.submit_profile(record):
            self.exported += 1

    def _cut_short(self) -> None:
        """Count every prefix that will not be fetched now as failed: the rest of the
        workflow in flight (the prefix in flight too) and all waiting workflows."""
        self.failed += self._unfetched + sum(len(w.prefixes) for w in self._waiting)
        self._unfetched = 0
        self._waiting.clear()

    def close(self) -> None:
        """Stop fetching (scheduler close); what is not fetched is counted as failed."""
        self._cut_short()
        self._fetching = None
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None
