"""One OTLP export attempt over gRPC: the channel, status codes and ``RetryInfo``.

Its own module because everything gRPC-specific is here: the channel (shared with the
other signals' senders to the same collector, :mod:`.grpc_channels`; reconnected at
once when the collector was unavailable), which status codes are retryable, the
server's ``google.rpc.RetryInfo`` delay, and a ``RESOURCE_EXHAUSTED`` about the message
size, which asks the caller to split the batch (:func:`otel_spans.export.outcome.deliver`)
where one about load is retried only when the server says when. The send loop around
an attempt is :class:`~otel_spans.export.otlp_retry.OtlpSender`'s.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from otel_spans.export.grpc_channels import SharedChannel, acquire, release
from otel_spans.export.otlp_retry import AT_ONCE, Answer, OtlpSender, logger, user_agent
from otel_spans.export.outcome import REFUSED, Sent
from otel_spans.settings import ExportTarget

if TYPE_CHECKING:
    import grpc

#: The gRPC method of each signal's collector service.
_EXPORT_METHODS = {
    "traces": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "logs": "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
    "metrics": "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
}


class GrpcSender(OtlpSender):
    """``credentials`` None: the system's roots when the endpoint calls for TLS."""

    def __init__(
        self, target: ExportTarget, signal: str, credentials: grpc.ChannelCredentials | None
    ):
        super().__init__(target, signal)
        import grpc

        self._credentials = credentials
        url = urlparse(self.endpoint)
        # gRPC has no place for ``user:password@``; a hand-built target may still carry
        # one, and the address shows up in gRPC's own error messages.
        self._address = (url.netloc or self.endpoint).rpartition("@")[2]
        # The scheme decides, as the OTLP exporter specification says; ``insecure``
        # only speaks for an endpoint without one.
        if url.scheme in ("http", "https"):
            self._insecure = url.scheme == "http"
        else:
            self._insecure = bool(target.insecure)
        self._metadata = tuple((k.lower(), v) for k, v in target.headers.items())
        self._compression = grpc.Compression.Gzip if target.compression else None
        self._lock = threading.Lock()
        #: What a channel is made of: senders of every signal to the same collector
        #: share one (:mod:`.grpc_channels`); headers and timeouts are per call.
        self._key = (
            "grpc",
            self._address,
            self._insecure,
            target.certificate,
            target.client_certificate,
            target.client_key,
            target.compression,
        )
        #: Taken by the first attempt: a channel costs milliseconds, and a cluster
        #: started and closed without a record to send needs none.
        self._shared: SharedChannel | None = None
        self._call: Any = None
        self._generation = 0

    def _connect(self) -> grpc.Channel:
        import grpc

        options = [("grpc.primary_user_agent", user_agent())]
        if self._insecure:
            return grpc.insecure_channel(
                self._address, options=options, compression=self._compression
            )
        credentials = self._credentials or grpc.ssl_channel_credentials()
        return grpc.secure_channel(
            self._address, credentials, options=options, compression=self._compression
        )

    def _current_call(self) -> Any:
        """This signal's call on the shared channel, remade after a reconnect; None
        once shut down."""
        shared = self._shared
        if shared is None:
            with self._lock:
                if self._stopping.is_set():
                    return None
                if self._shared is None:
                    self._shared = acquire(self._key, self._connect)
                shared = self._shared
        current = shared.current()
        if current is None:  # released by a shutdown that raced this call
            return None
        channel, generation = current
        if generation != self._generation or self._call is None:
            # Bytes in (already serialized), the response left undecoded: nothing in
            # an export response changes what happens next.
            self._call = channel.unary_unary(_EXPORT_METHODS[self.signal])
            self._generation = generation
        return self._call

    def _attempt(self, body: bytes, timeout: float) -> Answer:
        import grpc

        rpc = self._current_call()
        if rpc is None:
            return REFUSED
        generation = self._generation
        try:
            response = rpc(body, timeout=timeout, metadata=self._metadata)
        except ValueError:
            # The channel was closed under this call: by another signal's sender that
            # reconnected it (try the fresh one at once), or by shutdown.
            return REFUSED if self._stopping.is_set() else AT_ONCE
        except grpc.RpcError as error:
            call = error if isinstance(error, grpc.Call) else None
            code = call.code() if call is not None else None
            details = (call.details() if call is not None else "") or ""
            logger.debug("otel-spans: %s export: %s %s", self.signal, code, details)
            if code == grpc.StatusCode.UNAVAILABLE:
                # A fresh channel reconnects at once, instead of after the old one's
                # growing reconnect back-off (a collector that restarted is back now).
                shared = self._shared
                if shared is not None and not self._stopping.is_set():
                    shared.reconnect(generation)
            delay = _retry_info_delay(call)
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                if _about_size(details):
                    return Sent(False, too_large=True)
                if delay is None:  # retryable only when the server says when
                    self._warn(
                        "otel-spans: the collector refused %s: %s %s", self.signal, code, details
                    )
                    return REFUSED
            if code in _retryable_grpc_codes():
                return delay or 0.0
            self._warn("otel-spans: the collector refused %s: %s %s", self.signal, code, details)
            return REFUSED
        return self._accepted(response or b"")

    def shutdown(self) -> None:
        super().shutdown()
        with self._lock:
            shared, self._shared = self._shared, None
        if shared is not None:
            release(shared)  # the last sender of the channel closes it


def _about_size(details: str) -> bool:
    """Whether a RESOURCE_EXHAUSTED is about the message size (gRPC's own wording:
    "Received message larger than max (...)"), not about the server's load."""
    text = details.lower()
    return "larger than" in text or "message size" in text or "too large" in text


def _retry_info_delay(call: Any) -> float | None:
    """The server's ``google.rpc.RetryInfo`` delay in seconds, if it sent one."""
    if call is None:
        return None
    from google.rpc import error_details_pb2, status_pb2

    for key, value in call.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except Exception:
            return None
        for detail in status.details:
            if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                info = error_details_pb2.RetryInfo()
                detail.Unpack(info)
                delay = info.retry_delay
                return max(0.0, float(delay.seconds) + float(delay.nanos) / 1e9)
    return None


@functools.cache
def _retryable_grpc_codes() -> frozenset[grpc.StatusCode]:
    import grpc

    s = grpc.StatusCode
    return frozenset(
        {
            s.CANCELLED,
            s.DEADLINE_EXCEEDED,
            s.RESOURCE_EXHAUSTED,
            s.ABORTED,
            s.OUT_OF_RANGE,
            s.UNAVAILABLE,
            s.DATA_LOSS,
        }
    )
