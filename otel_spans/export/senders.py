"""Sending already-encoded OTLP trace and log requests, over gRPC or HTTP/protobuf.

The SDK's exporters take ``ReadableSpan`` and log record objects and encode them
themselves; the scheduler's spans and logs are encoded by :mod:`otel_spans.export.wire`
instead (for speed), so they need a sender for bytes. This one follows the OTLP
exporter specification as the SDK's exporters do: retryable gRPC codes and HTTP
statuses (429, 502, 503, 504) are retried with exponential back-off and ±20% jitter, a
server's ``Retry-After`` is honoured, and ``timeout`` bounds the whole export, retries
included. ``shutdown`` aborts a back-off at once.

Beyond that, as the specification asks and the SDK's exporters do not all do: the
response is decoded, so items a collector rejected through *partial success* are
counted (and its message logged, rate-limited) instead of being counted as exported;
gRPC ``RetryInfo`` and HTTP ``Retry-After`` (seconds or an HTTP date) set the back-off;
``RESOURCE_EXHAUSTED`` is retried only when the server says when (with ``RetryInfo``),
and one about the message size, like HTTP 413, asks the caller to split the batch
(:func:`otel_spans.export.outcome.deliver`); error details are logged; HTTP redirects
are not followed (an exporter must not send telemetry to a place it was not configured
with); a request that finds its kept-alive connection closed by the server is sent
again at once, once, instead of waiting out a back-off.
"""

from __future__ import annotations

import email.utils
import functools
import gzip
import importlib
import logging
import random
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse

from otel_spans.export.console import ConsoleSender, TeeSender
from otel_spans.export.files import FileSender, writer_for
from otel_spans.export.outcome import ACCEPTED, REFUSED, Sent
from otel_spans.export.tls import grpc_credentials, http_session
from otel_spans.redact import redact_url
from otel_spans.settings import ExportTarget
from otel_spans.throttle import Throttle

if TYPE_CHECKING:
    import grpc

logger = logging.getLogger("otel_spans")

_MAX_ATTEMPTS = 6
#: At most one warning per this many seconds (a collector that is down fails every batch).
_WARN_EVERY = 30.0
#: The gRPC method of each signal's collector service.
_EXPORT_METHODS = {
    "traces": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "logs": "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
}
_RETRYABLE_HTTP = frozenset({429, 502, 503, 504})
#: What the collector answers an export with, by signal (for partial success).
_RESPONSE_TYPES = {
    "traces": (
        "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
        "ExportTraceServiceResponse",
        "rejected_spans",
    ),
    "logs": (
        "opentelemetry.proto.collector.logs.v1.logs_service_pb2",
        "ExportLogsServiceResponse",
        "rejected_log_records",
    ),
}
#: An attempt's answer: a final :class:`Sent`, or seconds to wait before the next
#: attempt (0: the default back-off; :data:`_AT_ONCE`: now, once per export).
_Answer = Sent | float
_AT_ONCE = -1.0


def _user_agent() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"otel-spans/{version('otel-spans')}"
    except PackageNotFoundError:
        return "otel-spans"


class RequestSender(Protocol):
    """Sends one serialized export request: to a collector, a file, or nowhere."""

    def send(self, request: bytes) -> Sent: ...

    def shutdown(self) -> None: ...


class _NoSender:
    def send(self, request: bytes) -> Sent:
        return ACCEPTED

    def shutdown(self) -> None:
        pass


def make_request_sender(target: ExportTarget, *, signal: str, role: str) -> RequestSender:
    """Where the scheduler's pre-encoded ``signal`` requests (``traces``, ``logs``) go.

    Workers' spans go through the SDK's exporters (:mod:`otel_spans.export.sdk`).
    """
    primary = _primary_sender(target, signal=signal, role=role)
    if not target.console:
        return primary
    console = ConsoleSender(signal)
    return console if target.kind == "none" else TeeSender(primary, console)


def _primary_sender(target: ExportTarget, *, signal: str, role: str) -> RequestSender:
    if target.kind == "none":
        return _NoSender()
    if target.kind == "file":
        return FileSender(writer_for(target, signal, role), signal)
    if target.protocol == "grpc":
        return GrpcSender(target, signal, grpc_credentials(target))
    return HttpSender(target, signal, http_session(target))


class OtlpSender:
    """Sends serialized export requests of one signal (``traces``, ``logs``) to ``target``.

    An HTTP ``target.endpoint`` is the signal's full URL (``.../v1/logs``).
    """

    def __init__(self, target: ExportTarget, signal: str):
        assert target.endpoint is not None
        self.target = target
        self.signal = signal
        self.endpoint: str = target.endpoint
        self._stopping = threading.Event()
        self._warnings = Throttle(_WARN_EVERY)

    def _warn(self, message: str, *args: object) -> None:
        shown = [redact_url(a) if isinstance(a, str) else a for a in args]
        self._warnings.log(logging.WARNING, message, *shown)

    def send(self, request: bytes) -> Sent:
        """What the collector did with the request (accepted, with how many items it
        rejected; refused; too large), retries included."""
        deadline = time.monotonic() + self.target.timeout
        body = self._body(request)
        at_once_left = True
        attempt = 0
        while attempt < _MAX_ATTEMPTS:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            answer = self._attempt(body, remaining)
            if isinstance(answer, Sent):
                return answer
            if answer == _AT_ONCE:
                if at_once_left:
                    at_once_left = False
                    continue  # a stale kept-alive connection: the next one is fresh
                answer = 0.0
            backoff = answer or 2**attempt * random.uniform(0.8, 1.2)
            attempt += 1
            if attempt == _MAX_ATTEMPTS or backoff > deadline - time.monotonic():
                break
            if self._stopping.wait(backoff):
                break
        self._warn(
            "otel-spans: exporting %s to %s failed after retries", self.signal, self.endpoint
        )
        return REFUSED

    def _accepted(self, response: bytes) -> Sent:
        """Decode a success response: a partial success is counted and logged."""
        module, name, field = _RESPONSE_TYPES[self.signal]
        try:
            message = getattr(importlib.import_module(module), name).FromString(response)
        except Exception:  # an empty or foreign body is a plain success
            return ACCEPTED
        partial = message.partial_success
        rejected = int(getattr(partial, field))
        if rejected or partial.error_message:
            self._warn(
                "otel-spans: the collector at %s rejected %d %s of a request: %s",
                self.endpoint,
                rejected,
                field.removeprefix("rejected_").replace("_", " "),
                partial.error_message or "(no message)",
            )
        return Sent(True, rejected=rejected)

    def _body(self, request: bytes) -> bytes:
        """What every attempt sends (built once per export, not per retry)."""
        return request

    def _attempt(self, body: bytes, timeout: float) -> _Answer:
        raise NotImplementedError

    def shutdown(self) -> None:
        self._stopping.set()


class GrpcSender(OtlpSender):
    """``credentials`` None: the system's roots when the endpoint calls for TLS."""

    def __init__(
        self, target: ExportTarget, signal: str, credentials: grpc.ChannelCredentials | None
    ):
        super().__init__(target, signal)
        import grpc

        self._credentials = credentials
        url = urlparse(self.endpoint)
        self._address = url.netloc or self.endpoint
        # The scheme decides, as the OTLP exporter specification says; ``insecure``
        # only speaks for an endpoint without one.
        if url.scheme in ("http", "https"):
            self._insecure = url.scheme == "http"
        else:
            self._insecure = bool(target.insecure)
        self._metadata = tuple((k.lower(), v) for k, v in target.headers.items())
        self._compression = grpc.Compression.Gzip if target.compression else None
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._call: Any = None
        self._connect()

    def _connect(self) -> None:
        import grpc

        options = [("grpc.primary_user_agent", _user_agent())]
        if self._insecure:
            channel = grpc.insecure_channel(
                self._address, options=options, compression=self._compression
            )
        else:
            credentials = self._credentials or grpc.ssl_channel_credentials()
            channel = grpc.secure_channel(
                self._address, credentials, options=options, compression=self._compression
            )
        old, self._channel = self._channel, channel
        # Bytes in (already serialized), the response left undecoded: nothing in an
        # export response changes what happens next.
        self._call = channel.unary_unary(_EXPORT_METHODS[self.signal])
        if old is not None:
            old.close()

    def _attempt(self, body: bytes, timeout: float) -> _Answer:
        import grpc

        try:
            response = self._call(body, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            call = error if isinstance(error, grpc.Call) else None
            code = call.code() if call is not None else None
            details = (call.details() if call is not None else "") or ""
            logger.debug("otel-spans: %s export: %s %s", self.signal, code, details)
            if code == grpc.StatusCode.UNAVAILABLE:
                # A fresh channel reconnects at once, instead of after the old one's
                # growing reconnect back-off (a collector that restarted is back now).
                with self._lock:
                    if not self._stopping.is_set():
                        self._connect()
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
            if self._channel is not None:
                self._channel.close()


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


class HttpSender(OtlpSender):
    """``session`` None: a plain ``requests`` session."""

    def __init__(self, target: ExportTarget, signal: str, session: Any):
        super().__init__(target, signal)
        import requests

        self._session = session or requests.Session()
        self._session.verify = target.certificate or True
        if target.client_certificate and target.client_key:
            self._session.cert = (target.client_certificate, target.client_key)
        elif target.client_certificate:
            self._session.cert = target.client_certificate
        self._headers = {
            **target.headers,
            "Content-Type": "application/x-protobuf",
            "User-Agent": _user_agent(),
        }
        if target.compression:
            self._headers["Content-Encoding"] = "gzip"

    def _body(self, request: bytes) -> bytes:
        return gzip.compress(request) if self.target.compression else request

    def _attempt(self, body: bytes, timeout: float) -> _Answer:
        import requests

        try:
            response = self._session.post(
                self.endpoint,
                data=body,
                headers=self._headers,
                timeout=timeout,
                allow_redirects=False,
            )
        except requests.Timeout as error:
            logger.debug("otel-spans: %s export: %s", self.signal, type(error).__name__)
            return 0.0
        except requests.ConnectionError as error:
            logger.debug("otel-spans: %s export: %r", self.signal, error)
            return _AT_ONCE if _closed_by_server(error) else 0.0
        status = response.status_code
        if 200 <= status < 300:
            return self._accepted(response.content)
        if status == 413:
            return Sent(False, too_large=True)
        if 300 <= status < 400:
            self._warn(
                "otel-spans: the collector at %s answered %s with a redirect to %s, which "
                "is not followed: configure that endpoint instead",
                self.endpoint,
                self.signal,
                response.headers.get("Location", "(nowhere)"),
            )
            return REFUSED
        if status in _RETRYABLE_HTTP:
            return retry_after_seconds(response.headers.get("Retry-After"))
        self._warn(
            "otel-spans: the collector refused %s: HTTP %d %s",
            self.signal,
            status,
            _status_message(response.content),
        )
        return REFUSED

    def shutdown(self) -> None:
        super().shutdown()
        self._session.close()


def retry_after_seconds(value: str | None, now: float | None = None) -> float:
    """An HTTP ``Retry-After``: delay-seconds or an HTTP date; 0 (the default back-off)
    when absent or unreadable."""
    if not value:
        return 0.0
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _closed_by_server(error: Exception) -> bool:
    """The server closed a kept-alive connection as the request went out: nothing was
    processed, and a fresh connection will do."""
    text = repr(error)
    return any(
        sign in text
        for sign in ("RemoteDisconnected", "Connection aborted", "ConnectionResetError")
    )


def _status_message(body: bytes) -> str:
    """The message of the ``google.rpc.Status`` an OTLP/HTTP error carries, if any."""
    from google.rpc import status_pb2

    try:
        return str(status_pb2.Status.FromString(body).message)
    except Exception:
        return ""
