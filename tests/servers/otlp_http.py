"""The OTLP/HTTP half of :class:`~tests.servers.otlp_receiver.OtlpReceiver`.

Why stdlib ``http.server`` rather than a web framework: the receiver must
behave like a real OTLP/HTTP endpoint (protobuf or JSON bodies, gzip,
``google.rpc.Status`` error bodies, keep-alive) yet also misbehave on
demand -- hang without answering, drop a connection whose client gave up --
which needs control over each socket.  Decisions about *what* to answer
(fault modes, recording) belong to the receiver, reached through the small
:class:`ExportSink` protocol, so this module is transport only.
"""

from __future__ import annotations

import contextlib
import email.utils
import gzip
import select
import socket
import ssl
import sys
import threading
import time
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Protocol, cast

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import code_pb2, status_pb2

from .otlp_views import (
    REQUEST_TYPES,
    HeaderValue,
    ReceivedRequest,
    Signal,
    parse_otlp_json,
)

__all__ = ["HTTP_PATHS", "ExportSink", "Mode", "OtlpHttpServer", "status_body"]

#: Answering modes, see :meth:`OtlpReceiver.set_mode`.
Mode = Literal["ok", "unavailable", "reject", "hang", "throttle", "redirect", "drop_once"]
#: Seconds a "throttle" answer asks the client to wait (gRPC RetryInfo, HTTP Retry-After).
THROTTLE_SECONDS = 2

HTTP_PATHS: dict[str, Signal] = {
    "/v1/traces": "traces",
    "/v1/metrics": "metrics",
    "/v1/logs": "logs",
}


class ExportSink(Protocol):
    """What the transport needs from the receiver."""

    def _note_attempt(self, signal: Signal) -> None: ...

    def _note_error(self, text: str) -> None: ...

    def _await_mode(self, client_alive: Callable[[], bool]) -> Mode | None: ...

    def _record(self, rec: ReceivedRequest) -> None: ...

    def _response(self, signal: Signal, request: Message) -> Message: ...

    def _max_recv(self) -> int: ...

    def set_mode(self, mode: Mode) -> None: ...


def status_body(code: int, message: str) -> bytes:
    """Serialized ``google.rpc.Status``, the body OTLP/HTTP uses for errors."""
    return cast(bytes, status_pb2.Status(code=code, message=message).SerializeToString())


class OtlpHttpServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that can do TLS per connection and be torn down.

    The TLS handshake happens in the per-connection thread (not in the accept
    loop) so one bad client cannot stall the server, and every live
    connection is tracked so :meth:`close_connections` can unblock handler
    threads parked on idle keep-alive sockets when the receiver stops.
    """

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        receiver: ExportSink,
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        self.receiver = receiver
        self.ssl_context = ssl_context
        self._conn_lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        super().__init__(address, _OtlpHttpHandler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        raw = cast(socket.socket, request)
        with self._conn_lock:
            self._conns.add(raw)
        try:
            conn: socket.socket = raw
            if self.ssl_context is not None:
                conn = self.ssl_context.wrap_socket(raw, server_side=True)
            super().finish_request(conn, client_address)
        finally:
            with self._conn_lock:
                self._conns.discard(raw)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Failed TLS handshakes, clients vanishing, ... are expected in fault
        # tests; keep them for inspection instead of spraying stderr.
        exc = sys.exc_info()[1]
        self.receiver._note_error(f"http {client_address}: {exc!r}")

    def close_connections(self) -> None:
        with self._conn_lock:
            conns = list(self._conns)
        for sock in conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class _OtlpHttpHandler(BaseHTTPRequestHandler):
    """OTLP/HTTP endpoint: POST /v1/{traces,metrics,logs}."""

    protocol_version = "HTTP/1.1"  # keep-alive, as real exporters expect
    server: OtlpHttpServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request access logs; tests read recorded data instead."""

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks: list[bytes] = []
            while True:
                size_line = self.rfile.readline()
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # Consume optional trailers up to the blank line.
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _client_connected(self) -> bool:
        """Best-effort check that the client has not hung up on us."""
        sock = self.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return False
        if not readable:
            return True
        if isinstance(sock, ssl.SSLSocket):
            # No MSG_PEEK on TLS; an OTLP client never pipelines, so a
            # readable socket means close_notify / EOF.
            return False
        try:
            return bool(sock.recv(1, socket.MSG_PEEK))
        except BlockingIOError:
            return True
        except OSError:
            return False

    def do_POST(self) -> None:
        receiver = self.server.receiver
        signal = HTTP_PATHS.get(self.path.split("?", 1)[0])
        body = self._read_body()
        if signal is None:
            self._send(404, b"unknown OTLP path", "text/plain")
            return
        if len(body) > receiver._max_recv():
            self._send(
                413,
                status_body(code_pb2.RESOURCE_EXHAUSTED, f"request of {len(body)} bytes too large"),
                "application/x-protobuf",
            )
            return
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        try:
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            elif encoding not in ("", "identity"):
                self._send(415, f"unsupported encoding {encoding}".encode(), "text/plain")
                return
        except (OSError, zlib.error) as exc:
            receiver._note_error(f"http {signal}: bad {encoding} body: {exc!r}")
            self._send(400, b"cannot decompress body", "text/plain")
            return

        ctype = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        cls = REQUEST_TYPES[signal]
        try:
            if ctype == "application/x-protobuf":
                request: Message = cls.FromString(body)
            elif ctype == "application/json":
                request = parse_otlp_json(body, cls)
            else:
                self._send(415, f"unsupported content type {ctype!r}".encode(), "text/plain")
                return
        except (DecodeError, json_format.ParseError, ValueError) as exc:
            receiver._note_error(f"http {signal}: undecodable body: {exc!r}")
            self._send(400, b"cannot decode OTLP request", "text/plain")
            return

        headers: dict[str, HeaderValue] = {}
        for key, value in self.headers.items():
            k = key.lower()
            prev = headers.get(k)
            headers[k] = f"{prev}, {value}" if isinstance(prev, str) else value

        receiver._note_attempt(signal)
        mode = receiver._await_mode(self._client_connected)
        if mode is None:
            # Stopping, or the client gave up while we were hanging: drop
            # the connection without answering, like a dying server would.
            self.close_connection = True
            return
        if mode == "unavailable":
            self._send(
                503,
                status_body(code_pb2.UNAVAILABLE, "receiver unavailable"),
                "application/x-protobuf",
            )
            return
        if mode == "reject":
            self._send(
                400,
                status_body(code_pb2.INVALID_ARGUMENT, "receiver rejects"),
                "application/x-protobuf",
            )
            return
        if mode == "throttle":
            # Retry-After as an HTTP date (the form the seconds-only readers miss)
            when = email.utils.formatdate(time.time() + THROTTLE_SECONDS, usegmt=True)
            self.send_response(429)
            self.send_header("Retry-After", when)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if mode == "redirect":
            self.send_response(307)
            self.send_header("Location", f"{self.path}/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if mode == "drop_once":
            # As a server closing a kept-alive connection the moment a request arrives:
            # no answer at all; the next request is answered normally.
            receiver.set_mode("ok")
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        receiver._record(ReceivedRequest(signal, "http", request, headers))
        if ctype == "application/json":
            self._send(200, b"{}", "application/json")
        else:
            response = receiver._response(signal, request).SerializeToString()
            self._send(200, response, "application/x-protobuf")
