"""Resources, exporters and the bounded hand-off between the event loop and the network.

This is the only module that builds OpenTelemetry SDK exporters. The scheduler's event
loop calls :meth:`ExportPipeline.submit`, which never blocks and never raises: when the
queue is full the record is dropped and counted. A daemon thread drains the queue in
batches and does the encoding and the network I/O, so a collector that is slow, down or
hanging costs the scheduler nothing but the records it cannot take.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Generic, TypeVar

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_spans import semconv
from otel_spans.config import ExportTarget, Settings
from otel_spans.jsonfile import JsonLinesWriter

logger = logging.getLogger("otel_spans")

R = TypeVar("R")

#: How long the exporter thread waits for a batch to fill before sending what it has.
_BATCH_WAIT = 0.2
#: At most one "records dropped" warning per this many seconds.
_WARN_EVERY = 30.0


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
    #: Still queued, or being sent, when shutdown's deadline passed.
    unsent: int
    queued: int
    #: In the batch the exporter thread is sending right now.
    sending: int

    @property
    def lost(self) -> int:
        return self.dropped + self.failed + self.unsent

    def as_dict(self) -> dict[str, int | str]:
        return {**asdict(self), "lost": self.lost}


class ExportPipeline(Generic[R]):
    """A bounded queue of records and the thread that sends them in batches.

    ``send`` turns a batch of records into signals and exports them; it runs only on
    the pipeline's own thread and returns whether the backend accepted the batch.
    ``stop`` aborts what ``send`` is doing (e.g. the exporter's retry back-off) and is
    called once at close.
    """

    def __init__(
        self,
        signal: str,
        send: Callable[[list[R]], bool],
        stop: Callable[[], object],
        *,
        queue_size: int,
        batch_size: int,
    ):
        self.signal = signal
        self._send = send
        self._stop = stop
        self._queue_size = queue_size
        self._batch_size = batch_size
        self._items: deque[R] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._abandoned = False
        self._submitted = self._exported = self._dropped = self._failed = self._unsent = 0
        self._sending = 0
        self._last_warning = 0.0
        self._thread = threading.Thread(
            target=self._run, name=f"otel-spans-{signal}-exporter", daemon=True
        )
        self._thread.start()

    # -- event loop side: O(1), never blocks for long, never raises -------------------
    def submit(self, record: R) -> bool:
        """Queue one record; False (and counted) when the queue is full or closed."""
        with self._cond:
            self._submitted += 1
            if self._closing or len(self._items) >= self._queue_size:
                self._dropped += 1
                dropped = self._dropped
            else:
                self._items.append(record)
                if len(self._items) >= self._batch_size:
                    self._cond.notify()
                return True
        now = time.monotonic()
        if now - self._last_warning >= _WARN_EVERY:
            self._last_warning = now
            logger.warning(
                "otel-spans: %s queue full (%d); %d records dropped so far",
                self.signal,
                self._queue_size,
                dropped,
            )
        return False

    def stats(self) -> PipelineStats:
        with self._cond:
            return PipelineStats(
                signal=self.signal,
                submitted=self._submitted,
                exported=self._exported,
                dropped=self._dropped,
                failed=self._failed,
                unsent=self._unsent,
                queued=len(self._items),
                sending=self._sending,
            )

    # -- exporter thread ------------------------------------------------------------------
    def _take(self) -> list[R]:
        with self._cond:
            if len(self._items) < self._batch_size and not self._closing:
                self._cond.wait(_BATCH_WAIT)
            n = min(len(self._items), self._batch_size)
            self._sending = n
            return [self._items.popleft() for _ in range(n)]

    def _run(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                if self._closing:
                    return
                continue
            try:
                ok = self._send(batch)
            except Exception:
                logger.exception("otel-spans: exporting %d %s failed", len(batch), self.signal)
                ok = False
            with self._cond:
                if self._abandoned:
                    return  # close() already counted this batch as unsent
                self._sending = 0
                if ok:
                    self._exported += len(batch)
                else:
                    self._failed += len(batch)

    # -- shutdown -----------------------------------------------------------------------
    def close(self, timeout: float) -> PipelineStats:
        """Flush for at most ``timeout`` seconds, then give up; blocking, call off the loop."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            # A batch still being sent when the deadline passed is abandoned with the
            # thread (a daemon): count it as unsent now, so no record goes uncounted.
            self._unsent += len(self._items) + self._sending
            self._sending = 0
            self._abandoned = True
            self._items.clear()
        # Abort retries still in flight; the exporter's own shutdown can block, so it
        # gets a thread and the rest of the budget, never more.
        stopper = threading.Thread(target=self._stop, daemon=True)
        stopper.start()
        stopper.join(max(0.05, deadline - time.monotonic()))
        stats = self.stats()
        if stats.lost:
            logger.warning(
                "otel-spans: %s: %d records never reached the backend "
                "(%d dropped on a full queue, %d failed to export, %d unsent at shutdown)",
                self.signal,
                stats.lost,
                stats.dropped,
                stats.failed,
                stats.unsent,
            )
        return stats


# -- resource ---------------------------------------------------------------------------
def build_resource(settings: Settings, *, instance_id: str, scheduler_address: str) -> Resource:
    """The resource of every signal this process exports.

    ``Resource.create`` merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; explicit
    otel-spans settings win over both, and ``dask`` replaces the SDK's
    ``unknown_service`` placeholder.
    """
    from importlib.metadata import version

    attributes: dict[str, str] = dict(settings.resource_attributes)
    attributes[semconv.SERVICE_INSTANCE_ID] = instance_id
    attributes[semconv.DASK_SCHEDULER_ADDRESS] = scheduler_address
    attributes[semconv.DASK_VERSION] = version("distributed")
    if settings.cluster_name:
        attributes[semconv.DASK_CLUSTER_NAME] = settings.cluster_name
    if settings.service_name:
        attributes[semconv.SERVICE_NAME] = settings.service_name
    resource = Resource.create(attributes)
    if str(resource.attributes.get(semconv.SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({semconv.SERVICE_NAME: semconv.DEFAULT_SERVICE_NAME}))
    return resource


# -- exporters ----------------------------------------------------------------------------
class OtlpJsonSpanExporter(SpanExporter):
    """Spans as OTLP/JSON lines in a local directory (the embedded default)."""

    def __init__(self, writer: JsonLinesWriter):
        self.writer = writer

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            self.writer.write(encode_spans(spans))
        except OSError:
            logger.exception("otel-spans: cannot write %s", self.writer.path)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


class _NoSpanExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def make_span_exporter(target: ExportTarget, *, role: str) -> SpanExporter:
    """The SDK span exporter for ``target``, every option passed explicitly."""
    if target.kind == "none":
        return _NoSpanExporter()
    if target.kind == "file":
        return OtlpJsonSpanExporter(JsonLinesWriter(target.directory, "traces", role))
    if target.protocol == "grpc":
        import grpc
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        credentials = None
        if target.certificate or target.client_certificate:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(target.certificate),
                private_key=_read(target.client_key),
                certificate_chain=_read(target.client_certificate),
            )
        return GrpcSpanExporter(
            endpoint=target.endpoint,
            insecure=target.insecure,
            credentials=credentials,
            headers=dict(target.headers),
            timeout=target.timeout,
            compression=grpc.Compression.Gzip if target.compression else None,
        )
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter(
        endpoint=target.endpoint,
        certificate_file=target.certificate,
        client_certificate_file=target.client_certificate,
        client_key_file=target.client_key,
        headers=dict(target.headers),
        timeout=target.timeout,
        compression=Compression.Gzip if target.compression else Compression.NoCompression,
    )
