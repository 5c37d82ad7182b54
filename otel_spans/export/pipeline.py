"""The bounded hand-off between the scheduler's event loop and an exporter thread.

The event loop calls :meth:`ExportPipeline.submit`, which never blocks and never raises:
when the queue is full the record is dropped and counted. A daemon thread drains the
queue in batches and does the encoding and the network I/O, so a collector that is
slow, down or hanging costs the scheduler nothing but the records it cannot take.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from otel_spans.export.outcome import Delivery
from otel_spans.throttle import Throttle

logger = logging.getLogger("otel_spans")

R = TypeVar("R")

#: At most one "records dropped" warning per this many seconds.
_WARN_EVERY = 30.0
#: After the exporter thread's loop failed, it waits this long before it runs again, so
#: a failure that repeats costs one attempt per this many seconds, not a busy loop.
_RESTART_DELAY = 1.0


@dataclass(frozen=True)
class PipelineStats:
    """Counters of one pipeline; ``lost`` is everything that never reached the backend."""

    signal: str
    submitted: int
    exported: int
    #: Refused at submit because the queue was full.
    dropped: int
    #: Handed to the exporter, which gave up (collector down, timeout, refused).
    failed: int
    #: Items (spans, log records) of accepted requests the backend rejected (OTLP
    #: partial success); counted in the backend's unit, not in records.
    rejected: int
    #: Records that alone made a request larger than the backend takes: never sent.
    too_large: int
    #: Still queued, or being sent, when shutdown's deadline passed.
    unsent: int
    #: Refused before the queue by a producer's own rate limit (a storm of Python logs).
    suppressed: int
    queued: int
    #: In the batch the exporter thread is sending right now.
    sending: int
    #: Times the exporter thread's own loop failed (a bug of ours, not an export that
    #: failed) and was restarted; records of the batch in hand are counted as failed.
    crashes: int = 0

    @property
    def lost(self) -> int:
        """Records that never reached the backend (``rejected`` items did reach it)."""
        return self.dropped + self.failed + self.too_large + self.unsent + self.suppressed

    def as_dict(self) -> dict[str, int | str]:
        # Not dataclasses.asdict: it deep-copies every field, and the metric reader
        # reads these counters several times per collection. The fields are all flat.
        return {**vars(self), "lost": self.lost}


class ExportPipeline(Generic[R]):
    """A bounded queue of records and the thread that sends them in batches.

    ``send`` turns a batch of records into signals and exports them; it runs only on
    the pipeline's own thread and returns whether the backend accepted the batch, or
    a :class:`~otel_spans.export.outcome.Delivery` that says it record by record.
    ``stop`` aborts what ``send`` is doing (e.g. the exporter's retry back-off) and is
    called once at close. ``batch_wait`` is how long (seconds) the thread waits for a
    batch to fill before it sends what it has (``traces.batch-wait``,
    ``logs.batch-wait``): a request has a fixed cost, which a longer wait pays less
    often. A full batch and :meth:`close` never wait.

    The main producer, the scheduler's event loop, calls :meth:`submit`, which takes
    no lock: a ``deque`` append is atomic, the producer alone writes the submit-side
    counters and the exporter thread alone writes the send-side ones. The loop can
    therefore never wait for the exporter thread, whatever that thread is doing.
    Producers on other threads each get a :class:`ThreadProducer` with counters of its
    own (:meth:`producer`), so no counter is ever written by two threads.
    """

    def __init__(
        self,
        signal: str,
        send: Callable[[list[R]], bool | Delivery],
        stop: Callable[[], object],
        *,
        queue_size: int,
        batch_size: int,
        batch_wait: float,
    ):
        self.signal = signal
        self._batch_wait = batch_wait
        self._send = send
        self._stop = stop
        self._queue_size = queue_size
        self._batch_size = batch_size
        self._items: deque[R] = deque()
        #: Set by the producer when a full batch waits; the thread also wakes on a timer.
        self._wake = threading.Event()
        #: Orders the exporter thread against close(); never taken by the producer.
        self._lock = threading.Lock()
        self._closing = False
        self._abandoned = False
        self._submitted = self._dropped = 0  # written by the producer only
        self._exported = self._failed = self._sending = 0  # by the exporter thread only
        self._rejected = self._too_large = 0  # by the exporter thread only
        self._unsent = 0  # by close() only
        self._crashes = 0  # by the exporter thread only
        self._drop_warnings = Throttle(_WARN_EVERY)
        self._crash_log = Throttle(_WARN_EVERY)
        self._producers: list[ThreadProducer[R]] = []
        #: Started by the first record: a pipeline that never gets one (a cluster
        #: started and closed again, a signal unused) costs no thread.
        self._thread = threading.Thread(
            target=self._run, name=f"otel-spans-{signal}-exporter", daemon=True
        )
        self._started = False
        #: When :meth:`stop` must be done by: set by :meth:`flush`.
        self._deadline = 0.0
        #: Orders the first records' producers; taken once per producer at most.
        self._start_lock = threading.Lock()

    # -- event loop side: O(1), lock-free, never raises -----------------------------------
    def submit(self, record: R) -> bool:
        """Queue one record; False (and counted) when the queue is full or closed."""
        self._submitted += 1
        items = self._items
        if self._closing or len(items) >= self._queue_size:
            self._dropped += 1
            self._warn_dropped()
            return False
        items.append(record)  # _append's body, inline: this is the event loop's hot path
        if not self._started:
            self._start()
        if len(items) >= self._batch_size and not self._wake.is_set():
            self._wake.set()
        return True

    def _start(self) -> None:
        """Start the exporter thread, once, whichever producer comes first."""
        with self._start_lock:
            if not self._started and not self._closing:
                self._thread.start()
                self._started = True

    def _full(self) -> bool:
        return self._closing or len(self._items) >= self._queue_size

    def _append(self, record: R) -> None:
        items = self._items
        items.append(record)
        if not self._started:
            self._start()
        if len(items) >= self._batch_size and not self._wake.is_set():
            self._wake.set()

    def producer(self) -> ThreadProducer[R]:
        """A producer for one other thread (or for callers that serialize themselves)."""
        producer = ThreadProducer(self)
        self._producers.append(producer)
        return producer

    def _warn_dropped(self) -> None:
        self._drop_warnings.log(
            logging.WARNING,
            "otel-spans: %s queue full (%d); %d records dropped so far",
            self.signal,
            self._queue_size,
            self._dropped + sum(p.dropped for p in self._producers),
        )

    def stats(self) -> PipelineStats:
        """A reading of the counters (each exact; taken without stopping the others)."""
        producers = self._producers
        return PipelineStats(
            signal=self.signal,
            submitted=self._submitted + sum(p.submitted for p in producers),
            exported=self._exported,
            dropped=self._dropped + sum(p.dropped for p in producers),
            failed=self._failed,
            rejected=self._rejected,
            too_large=self._too_large,
            unsent=self._unsent,
            suppressed=sum(p.suppressed for p in producers),
            queued=len(self._items),
            sending=self._sending,
            crashes=self._crashes,
        )

    # -- exporter thread ------------------------------------------------------------------
    def _take(self) -> list[R]:
        if len(self._items) < self._batch_size and not self._closing:
            self._wake.wait(self._batch_wait)
        self._wake.clear()
        batch: list[R] = []
        with self._lock:
            if self._abandoned:
                return batch
            while self._items and len(batch) < self._batch_size:
                batch.append(self._items.popleft())
            self._sending = len(batch)
        return batch

    def _run(self) -> None:
        """The thread's body: the send loop, restarted (and counted) if it fails.

        A failure of the loop itself would otherwise end the thread silently, and the
        queue would fill and drop every record from then on, for the process's life.
        """
        while True:
            try:
                self._loop()
                return
            except Exception:
                self._crashed()
            if self._closing:
                return
            self._wake.wait(_RESTART_DELAY)

    def _crashed(self) -> None:
        self._crashes += 1
        self._crash_log.log(
            logging.ERROR,
            "otel-spans: the %s exporter thread failed (%d times so far); restarting it",
            self.signal,
            self._crashes,
            exc_info=True,
        )
        try:
            with self._lock:
                if not self._abandoned:
                    self._failed += self._sending
                self._sending = 0
        except Exception:  # the bookkeeping itself is what failed: count nothing more
            pass

    def _loop(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                if self._closing:
                    return
                continue
            try:
                result = self._send(batch)
            except Exception:
                logger.exception("otel-spans: exporting %d %s failed", len(batch), self.signal)
                result = False
            if isinstance(result, bool):
                result = Delivery(len(batch)) if result else Delivery(0, len(batch))
            with self._lock:
                if self._abandoned:
                    return  # close() already counted this batch as unsent
                self._exported += result.exported
                self._failed += result.failed
                self._rejected += result.rejected
                self._too_large += result.too_large
                self._sending = 0  # last: a failure above leaves the batch to _crashed

    # -- shutdown -----------------------------------------------------------------------
    def close(self, timeout: float) -> PipelineStats:
        """Flush for at most ``timeout`` seconds, then give up; blocking, call off the loop."""
        self.flush(timeout)
        return self.stop()

    def flush(self, timeout: float) -> None:
        """The first half of :meth:`close`: take no more records and send what is queued,
        for at most ``timeout`` seconds; the transport stays open until :meth:`stop`.

        Signals flushes every pipeline before it stops any: a transport (a gRPC channel)
        open while the next one sends keeps gRPC running between them instead of
        starting and stopping it once per pipeline.
        """
        self._deadline = time.monotonic() + timeout
        with self._start_lock:
            self._closing = True
            started = self._started
        self._wake.set()
        if started:
            self._thread.join(max(0.0, self._deadline - time.monotonic()))
        with self._lock:
            # A batch still being sent when the deadline passed is abandoned with the
            # thread (a daemon): count it as unsent now, so no record goes uncounted.
            self._unsent += len(self._items) + self._sending
            self._sending = 0
            self._abandoned = True
            self._items.clear()

    def stop(self) -> PipelineStats:
        """The second half of :meth:`close` (after :meth:`flush`): stop the exporter, and
        the final counters, with a warning when records were lost."""
        # Abort retries still in flight; the exporter's own shutdown can block, so it
        # gets the rest of the budget, never more. With the thread gone (it finished, or
        # never started) nothing is in flight: no thread is needed to bound the stop.
        if self._thread.is_alive():
            call_with_deadline(self._stop, max(0.05, self._deadline - time.monotonic()))
        else:
            try:
                self._stop()
            except Exception:
                logger.exception("otel-spans: stopping the %s exporter failed", self.signal)
        stats = self.stats()
        if stats.lost:
            logger.warning(
                "otel-spans: %s: %d records never reached the backend (%d dropped on a "
                "full queue, %d failed to export, %d too large to send, %d unsent at "
                "shutdown, %d suppressed by a rate limit)",
                self.signal,
                stats.lost,
                stats.dropped,
                stats.failed,
                stats.too_large,
                stats.unsent,
                stats.suppressed,
            )
        return stats


class ThreadProducer(Generic[R]):
    """Submits to a pipeline from a thread other than its main producer's.

    The queue bound holds (give or take one record per producer racing on it: the
    check and the append are two steps). Callers serialize their own calls, as a
    ``logging.Handler`` does around ``emit``; the counters are this producer's alone.
    """

    def __init__(self, pipeline: ExportPipeline[R]):
        self._pipeline = pipeline
        self.submitted = self.dropped = self.suppressed = 0

    def submit(self, record: R) -> bool:
        """Queue one record; False (and counted) when the queue is full or closed."""
        pipeline = self._pipeline
        self.submitted += 1
        if pipeline._full():
            self.dropped += 1
            pipeline._warn_dropped()
            return False
        pipeline._append(record)
        return True

    def suppress(self) -> None:
        """Count a record refused before it was built (the producer's own rate limit)."""
        self.submitted += 1
        self.suppressed += 1


def call_with_deadline(function: Callable[[], object], timeout: float) -> bool:
    """Call ``function`` on a daemon thread and wait for it at most ``timeout`` seconds.

    How every shutdown here stays bounded whatever the collector does: an SDK
    processor's or exporter's own shutdown can block on the network for its full
    timeout. Returns whether it finished in time; if not, the thread is abandoned.
    """
    thread = threading.Thread(target=function, name="otel-spans-shutdown", daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive()
