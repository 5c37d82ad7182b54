"""Sending already-encoded OTLP trace and log requests, over gRPC or HTTP/protobuf.

The SDK's exporters take ``ReadableSpan`` and log record objects and encode them
themselves; the scheduler's spans and logs are encoded by :mod:`otel_spans.export.wire`
instead (for speed), so they need a sender for bytes. This one follows the OTLP
exporter specification as the SDK's exporters do: retryable gRPC codes and HTTP
statuses (429, 502, 503, 504) are retried with exponential back-off and ±20% jitter, a
server's ``Retry-After`` is honoured, and ``timeout`` bounds the whole export, retries
included. ``shutdown`` aborts a back-off at once.
"""

from __future__ import annotations

import functools
import gzip
import logging
import random
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse

from otel_spans.config import ExportTarget
from otel_spans.export.console import ConsoleSender, TeeSender
from otel_spans.export.files import FileSender, JsonLinesWriter
from otel_spans.export.tls import grpc_credentials, http_session
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


def _user_agent() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"otel-spans/{version('otel-spans')}"
    except PackageNotFoundError:
        return "otel-spans"


class RequestSender(Protocol):
    """Sends one serialized export request: to a collector, a file, or nowhere."""

    def send(self, request: bytes) -> bool: ...

    def shutdown(self) -> None: ...


class _NoSender:
    def send(self, request: bytes) -> bool:
        return True

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
        return FileSender(JsonLinesWriter(target.directory, signal, role), signal)
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
        self._warnings.log(logging.WARNING, message, *args)

    def send(self, request: bytes) -> bool:
        """True when the collector accepted the request; False when it gave up."""
        deadline = time.monotonic() + self.target.timeout
        body = self._body(request)
        for attempt in range(_MAX_ATTEMPTS):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            retry_after = self._attempt(body, remaining)
            if retry_after is None:
                return True
            if retry_after < 0:
                return False
            backoff = retry_after or 2**attempt * random.uniform(0.8, 1.2)
            if attempt + 1 == _MAX_ATTEMPTS or backoff > deadline - time.monotonic():
                break
            if self._stopping.wait(backoff):
                break
        self._warn(
            "otel-spans: exporting %s to %s failed after retries", self.signal, self.endpoint
        )
        return False

    def _body(self, request: bytes) -> bytes:
        """What every attempt sends (built once per export, not per retry)."""
        return request

    def _attempt(self, body: bytes, timeout: float) -> float | None:
        """None: accepted; -1: not retryable; else retry after that many seconds (0:
        the default back-off)."""
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

    def _attempt(self, body: bytes, timeout: float) -> float | None:
        import grpc

        try:
            self._call(body, timeout=timeout, metadata=self._metadata)
            return None
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.Call) else None
            logger.debug("otel-spans: %s export: %s", self.signal, code)
            if code == grpc.StatusCode.UNAVAILABLE:
                # A fresh channel reconnects at once, instead of after the old one's
                # growing reconnect back-off (a collector that restarted is back now).
                with self._lock:
                    if not self._stopping.is_set():
                        self._connect()
            if code in _retryable_grpc_codes():
                return 0
            self._warn("otel-spans: the collector refused %s: %s", self.signal, code)
            return -1

    def shutdown(self) -> None:
        super().shutdown()
        with self._lock:
            if self._channel is not None:
                self._channel.close()


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

    def _attempt(self, body: bytes, timeout: float) -> float | None:
        import requests

        try:
            response = self._session.post(
                self.endpoint, data=body, headers=self._headers, timeout=timeout
            )
        except (requests.ConnectionError, requests.Timeout) as error:
            logger.debug("otel-spans: %s export: %s", self.signal, type(error).__name__)
            return 0
        if response.ok:
            return None
        if response.status_code not in _RETRYABLE_HTTP:
            self._warn(
                "otel-spans: the collector refused %s: HTTP %d", self.signal, response.status_code
            )
            return -1
        try:
            return max(0.0, float(response.headers.get("Retry-After", 0)))
        except ValueError:
            return 0

    def shutdown(self) -> None:
        super().shutdown()
        self._session.close()
