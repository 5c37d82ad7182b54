"""A real OTLP receiver (gRPC + HTTP/protobuf) on loopback, for tests.

Why not mock the exporter?  The library's job is to get telemetry onto the
wire correctly: right ids, right attribute types, compression, auth headers,
retry behaviour when the backend misbehaves.  Only a receiver that decodes
the genuine OTLP protobufs, over genuine gRPC and HTTP transports, can verify
that.  This receiver is built from ``opentelemetry-proto`` + ``grpcio`` + the
standard library only, so it has no moving parts we do not control, and it
offers knobs (:meth:`OtlpReceiver.set_mode`, TLS/mTLS) that a real collector
does not expose for fault-injection tests.

Everything received is recorded (thread-safely) together with the transport
and the request metadata/headers, and can be read back either raw
(:meth:`OtlpReceiver.requests`) or as flat, easily-asserted dataclasses
(:meth:`OtlpReceiver.spans`, :meth:`OtlpReceiver.metrics`,
:meth:`OtlpReceiver.logs`).
"""

from __future__ import annotations

import os
import ssl
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from types import TracebackType
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from .otlp_http import THROTTLE_SECONDS, Mode, OtlpHttpServer
from .otlp_views import (
    RESPONSE_TYPES,
    HeaderValue,
    ReceivedLog,
    ReceivedMetricPoint,
    ReceivedRequest,
    ReceivedSpan,
    Signal,
    SpanEvent,
    SpanLink,
    Transport,
    flatten_logs,
    flatten_metrics,
    flatten_spans,
)
from .ports import LOOPBACK, wait_until

__all__ = [
    "SIGNALS",
    "Mode",
    "OtlpReceiver",
    "ReceivedLog",
    "ReceivedMetricPoint",
    "ReceivedRequest",
    "ReceivedSpan",
    "Signal",
    "SpanEvent",
    "SpanLink",
    "Transport",
]

SIGNALS: tuple[Signal, ...] = ("traces", "metrics", "logs")
_MODES: frozenset[str] = frozenset(
    {"ok", "unavailable", "reject", "hang", "throttle", "redirect", "drop_once"}
)
#: The partial-success field of each signal's response.
_REJECTED_FIELDS: dict[Signal, str] = {
    "traces": "rejected_spans",
    "metrics": "rejected_data_points",
    "logs": "rejected_log_records",
}

# How often a request parked in "hang" mode re-checks whether its client went
# away or the receiver is stopping.  Small enough that stop() is prompt.
_HANG_POLL_S = 0.1

_T = TypeVar("_T")


# --------------------------------------------------------------------------
# gRPC plumbing
# --------------------------------------------------------------------------


class _TraceServicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(self, request: Message, context: grpc.ServicerContext) -> Message:
        return self._receiver._grpc_export("traces", request, context)


class _MetricsServicer(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(self, request: Message, context: grpc.ServicerContext) -> Message:
        return self._receiver._grpc_export("metrics", request, context)


class _LogsServicer(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(self, request: Message, context: grpc.ServicerContext) -> Message:
        return self._receiver._grpc_export("logs", request, context)


# --------------------------------------------------------------------------
# The receiver
# --------------------------------------------------------------------------


class OtlpReceiver:
    """OTLP gRPC + HTTP receiver on 127.0.0.1 that records what it gets.

    Usage::

        with OtlpReceiver() as rx:
            exporter = OTLPSpanExporter(endpoint=rx.grpc_endpoint, insecure=True)
            ...
            spans = rx.wait_for_spans(2)

    Both servers bind port 0 (the kernel picks a free port, no races) on the
    first :meth:`start`; a later ``start()`` after :meth:`stop` re-binds the
    same ports so a test can simulate a backend outage and recovery.

    Fault knobs: :meth:`set_mode` (``"ok"``, ``"unavailable"``, ``"reject"``,
    ``"hang"``).  Only requests answered successfully are recorded; *every*
    request that reached the receiver is counted by :meth:`attempts`, which
    is what retry tests want.

    TLS: pass PEM ``tls_cert`` + ``tls_key`` (and ``client_ca`` to require
    client certificates, i.e. mTLS).  It applies to both transports and the
    endpoints then use the ``https`` scheme.
    """

    def __init__(
        self,
        *,
        tls_cert: bytes | None = None,
        tls_key: bytes | None = None,
        client_ca: bytes | None = None,
        grpc_port: int = 0,
        http_port: int = 0,
        max_receive_message_length: int = 4 * 1024 * 1024,
    ) -> None:
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key must be given together")
        if client_ca is not None and tls_cert is None:
            raise ValueError("client_ca (mTLS) requires tls_cert/tls_key")
        self._tls_cert = tls_cert
        self._tls_key = tls_key
        self._client_ca = client_ca
        self._grpc_port = grpc_port
        self._http_port = http_port
        self._max_recv_bytes = max_receive_message_length

        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._mode: Mode = "ok"
        self._stopping = False
        self._records: list[ReceivedRequest] = []
        self._attempts: dict[Signal, int] = dict.fromkeys(SIGNALS, 0)
        self._errors: list[str] = []
        #: When set, accepted requests are answered with this partial success:
        #: (items rejected, message).
        self.partial: tuple[int, str] | None = None

        self._grpc_server: Any = None
        self._http_server: OtlpHttpServer | None = None
        self._http_thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------

    @property
    def tls(self) -> bool:
        """Whether both transports are served over TLS."""
        return self._tls_cert is not None

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._http_server is not None

    @property
    def grpc_port(self) -> int:
        """The bound gRPC port (0 before the first start)."""
        return self._grpc_port

    @property
    def http_port(self) -> int:
        """The bound HTTP port (0 before the first start)."""
        return self._http_port

    @property
    def grpc_target(self) -> str:
        """``host:port`` form for ``grpc.insecure_channel`` & co."""
        return f"{LOOPBACK}:{self._grpc_port}"

    @property
    def grpc_endpoint(self) -> str:
        """``http(s)://127.0.0.1:PORT`` -- what OTel gRPC exporters expect."""
        return f"{self._scheme}://{LOOPBACK}:{self._grpc_port}"

    @property
    def http_endpoint(self) -> str:
        """Base URL for OTLP/HTTP; append ``/v1/traces`` etc. per signal."""
        return f"{self._scheme}://{LOOPBACK}:{self._http_port}"

    @property
    def _scheme(self) -> str:
        return "https" if self.tls else "http"

    def start(self) -> OtlpReceiver:
        """Bind and serve both transports; returns self for chaining."""
        if self.running:
            return self
        with self._cond:
            self._stopping = False
        self._start_grpc()
        try:
            self._start_http()
        except BaseException:
            self._grpc_server.stop(None)
            self._grpc_server = None
            raise
        return self

    def _start_grpc(self) -> None:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="otlp-grpc"),
            options=[
                # A port collision must fail loudly, not load-balance
                # silently between two servers (grpc's default!).
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", self._max_recv_bytes),
            ],
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _TraceServicer(self), server
        )
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _MetricsServicer(self), server
        )
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _LogsServicer(self), server
        )
        address = f"{LOOPBACK}:{self._grpc_port}"
        if self.tls:
            assert self._tls_cert is not None and self._tls_key is not None
            creds = grpc.ssl_server_credentials(
                [(self._tls_key, self._tls_cert)],
                root_certificates=self._client_ca,
                require_client_auth=self._client_ca is not None,
            )
            port = server.add_secure_port(address, creds)
        else:
            port = server.add_insecure_port(address)
        if not port:
            raise OSError(f"gRPC could not bind {address}")
        self._grpc_port = int(port)
        server.start()
        self._grpc_server = server

    def _ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        assert self._tls_cert is not None and self._tls_key is not None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        # load_cert_chain only reads files; keep them just long enough.
        with tempfile.TemporaryDirectory(prefix="otlp-rx-tls-") as tmp:
            cert_path = os.path.join(tmp, "cert.pem")
            key_path = os.path.join(tmp, "key.pem")
            with open(cert_path, "wb") as fh:
                fh.write(self._tls_cert)
            with open(key_path, "wb") as fh:
                fh.write(self._tls_key)
            ctx.load_cert_chain(cert_path, key_path)
        if self._client_ca is not None:
            ctx.load_verify_locations(cadata=self._client_ca.decode("ascii"))
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def _start_http(self) -> None:
        server = OtlpHttpServer((LOOPBACK, self._http_port), self, self._ssl_context())
        self._http_port = int(server.server_address[1])
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"otlp-http-{self._http_port}",
            daemon=True,
        )
        thread.start()
        self._http_server = server
        self._http_thread = thread

    def stop(self, grace: float = 0.5) -> None:
        """Stop both servers promptly, even with requests parked in "hang".

        Recorded data is kept, so assertions can run after stopping.
        """
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._grpc_server is not None:
            self._grpc_server.stop(grace).wait(grace + 5.0)
            self._grpc_server = None
        if self._http_server is not None:
            self._http_server.shutdown()
            self._http_server.close_connections()
            self._http_server.server_close()
            self._http_server = None
        if self._http_thread is not None:
            self._http_thread.join(timeout=5.0)
            self._http_thread = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- fault knobs -------------------------------------------------------

    @property
    def mode(self) -> Mode:
        """The current answering mode (see :meth:`set_mode`)."""
        with self._lock:
            return self._mode

    def set_mode(self, mode: Mode) -> None:
        """Change how Export calls are answered, effective immediately.

        * ``"ok"``: decode, record, answer success.
        * ``"unavailable"``: gRPC ``UNAVAILABLE`` / HTTP 503 -- retryable per
          the OTLP spec, so exporters back off and retry.
        * ``"reject"``: gRPC ``INVALID_ARGUMENT`` / HTTP 400 -- permanent,
          exporters must drop the batch without retrying.
        * ``"throttle"``: gRPC ``RESOURCE_EXHAUSTED`` with a ``RetryInfo`` / HTTP 429
          with ``Retry-After`` as an HTTP date, both asking for ``THROTTLE_SECONDS``.
        * ``"redirect"``: HTTP 307 to another path (gRPC: answered as ``"ok"``).
        * ``"drop_once"``: HTTP: close the connection without answering, once, then
          back to ``"ok"`` (a server closing a kept-alive connection); gRPC: ``"ok"``.
        * ``"hang"``: accept the request and never answer until the mode
          changes or the receiver stops, so client timeouts fire.  A parked
          request whose client has gone away is discarded, not recorded;
          one whose client is still waiting when the mode changes is then
          answered according to the new mode.
        """
        if mode not in _MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {sorted(_MODES)}")
        with self._cond:
            self._mode = mode
            self._cond.notify_all()

    def _await_mode(self, client_alive: Callable[[], bool]) -> Mode | None:
        """Wait out "hang"; return the mode to answer with, None to drop."""
        with self._cond:
            hung = False
            while self._mode == "hang" and not self._stopping:
                if not client_alive():
                    return None
                hung = True
                self._cond.wait(_HANG_POLL_S)
            if self._stopping or (hung and not client_alive()):
                return None
            return self._mode

    # -- recording ---------------------------------------------------------

    def _note_attempt(self, signal: Signal) -> None:
        with self._lock:
            self._attempts[signal] += 1

    def _note_error(self, text: str) -> None:
        with self._lock:
            self._errors.append(text)

    def _record(self, rec: ReceivedRequest) -> None:
        with self._lock:
            self._records.append(rec)

    def _grpc_export(self, signal: Signal, request: Message, context: Any) -> Message:
        headers: dict[str, HeaderValue] = {}
        for key, value in context.invocation_metadata() or ():
            headers[str(key).lower()] = value
        self._note_attempt(signal)
        mode = self._await_mode(context.is_active)
        if mode is None:
            context.abort(grpc.StatusCode.UNAVAILABLE, "receiver stopping")
        if mode == "unavailable":
            context.abort(grpc.StatusCode.UNAVAILABLE, "receiver unavailable")
        if mode == "reject":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "receiver rejects")
        if mode == "throttle":
            retry = error_details_pb2.RetryInfo()
            retry.retry_delay.seconds = THROTTLE_SECONDS
            detail = any_pb2.Any()
            detail.Pack(retry)
            status = status_pb2.Status(
                code=code_pb2.RESOURCE_EXHAUSTED, message="receiver throttles", details=[detail]
            )
            context.set_trailing_metadata(
                (("grpc-status-details-bin", status.SerializeToString()),)
            )
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "receiver throttles")
        self._record(ReceivedRequest(signal, "grpc", request, headers))
        return self._response(signal, request)

    def _response(self, signal: Signal, request: Message) -> Message:
        """The success answer, with the partial success set by :attr:`partial`."""
        response = RESPONSE_TYPES[signal]()
        if self.partial is not None:
            rejected, message = self.partial
            setattr(response.partial_success, _REJECTED_FIELDS[signal], rejected)
            response.partial_success.error_message = message
        return response

    def _max_recv(self) -> int:
        return self._max_recv_bytes

    # -- accessors ---------------------------------------------------------

    def records(self, signal: Signal | None = None) -> list[ReceivedRequest]:
        """Accepted requests (optionally of one signal), in arrival order."""
        with self._lock:
            recs = list(self._records)
        return [r for r in recs if signal is None or r.signal == signal]

    def requests(self, signal: Signal) -> list[Any]:
        """Raw decoded ``Export*ServiceRequest`` protobufs for *signal*."""
        return [r.request for r in self.records(signal)]

    def headers(self, signal: Signal) -> list[dict[str, HeaderValue]]:
        """Metadata/headers of each accepted request for *signal*."""
        return [dict(r.headers) for r in self.records(signal)]

    def attempts(self, signal: Signal) -> int:
        """How many Export calls for *signal* arrived, whatever the answer."""
        with self._lock:
            return self._attempts[signal]

    def errors(self) -> list[str]:
        """Transport-level problems seen (bad bodies, TLS handshake failures)."""
        with self._lock:
            return list(self._errors)

    def spans(self) -> list[ReceivedSpan]:
        """All received spans, flattened, in arrival order."""
        return [s for r in self.records("traces") for s in flatten_spans(r)]

    def metrics(self) -> list[ReceivedMetricPoint]:
        """All received metric data points, flattened, in arrival order."""
        return [m for r in self.records("metrics") for m in flatten_metrics(r)]

    def logs(self) -> list[ReceivedLog]:
        """All received log records, flattened, in arrival order."""
        return [lg for r in self.records("logs") for lg in flatten_logs(r)]

    def clear(self) -> None:
        """Forget recorded requests, attempt counters and errors."""
        with self._lock:
            self._records.clear()
            self._attempts = dict.fromkeys(SIGNALS, 0)
            self._errors.clear()

    # -- waiting -----------------------------------------------------------

    @staticmethod
    def _wait_for(
        what: str,
        getter: Callable[[], Sequence[_T]],
        predicate_or_count: int | Callable[[_T], bool],
        count: int,
        timeout: float,
    ) -> list[_T]:
        if isinstance(predicate_or_count, int):
            needed = predicate_or_count

            def matching() -> list[_T]:
                return list(getter())

        else:
            needed = count
            pred = predicate_or_count

            def matching() -> list[_T]:
                return [x for x in getter() if pred(x)]

        def describe() -> str:
            got = list(getter())
            names = [getattr(x, "name", "?") for x in got][:20]
            return (
                f"wanted {needed} matching {what}, got {len(matching())} matching "
                f"of {len(got)} received (names: {names})"
            )

        def enough() -> list[_T] | None:
            found = matching()
            return found if len(found) >= needed else None

        if needed <= 0:
            return matching()
        return wait_until(enough, timeout=timeout, message=describe)

    def wait_for_spans(
        self,
        predicate_or_count: int | Callable[[ReceivedSpan], bool] = 1,
        timeout: float = 10.0,
        *,
        count: int = 1,
    ) -> list[ReceivedSpan]:
        """Wait for spans and return them.

        With an int *n*: until at least *n* spans arrived; returns all.
        With a predicate: until at least *count* spans match; returns the
        matching ones.  Raises ``AssertionError`` on timeout.
        """
        return self._wait_for("spans", self.spans, predicate_or_count, count, timeout)

    def wait_for_metrics(
        self,
        predicate_or_count: int | Callable[[ReceivedMetricPoint], bool] = 1,
        timeout: float = 10.0,
        *,
        count: int = 1,
    ) -> list[ReceivedMetricPoint]:
        """Like :meth:`wait_for_spans`, for metric data points."""
        return self._wait_for("metric points", self.metrics, predicate_or_count, count, timeout)

    def wait_for_logs(
        self,
        predicate_or_count: int | Callable[[ReceivedLog], bool] = 1,
        timeout: float = 10.0,
        *,
        count: int = 1,
    ) -> list[ReceivedLog]:
        """Like :meth:`wait_for_spans`, for log records."""
        return self._wait_for("log records", self.logs, predicate_or_count, count, timeout)

    def wait_for_requests(
        self, signal: Signal, count: int = 1, timeout: float = 10.0
    ) -> list[ReceivedRequest]:
        """Wait until at least *count* requests for *signal* were accepted."""
        return self._wait_for("requests", lambda: self.records(signal), count, count, timeout)

    def wait_for_attempts(self, signal: Signal, count: int = 1, timeout: float = 10.0) -> int:
        """Wait until at least *count* Export calls for *signal* arrived."""
        if count <= 0:
            return self.attempts(signal)

        def enough() -> int:
            n = self.attempts(signal)
            return n if n >= count else 0

        return wait_until(
            enough,
            timeout=timeout,
            message=lambda: f"wanted {count} {signal} attempts, got {self.attempts(signal)}",
        )
