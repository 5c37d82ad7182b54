"""A collector's HTTP answer is read up to 4 MiB after decompression, never further:
by the scheduler's sender and by the SDK's exporters (workers' spans, metrics) alike.

A loopback HTTP server answers every export with a body of a designed size, plain or
gzip-compressed (a small gzip body that inflates past the cap: the bomb the OTLP
specification's limit is for). Over the cap the export fails at once, counted, without
a retry; at the cap it is an ordinary success.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_spans.export.http_session import MAX_RESPONSE_BYTES
from otel_spans.export.outcome import Delivery, deliver
from otel_spans.export.sdk import make_span_exporter
from otel_spans.settings import ExportTarget
from tests.support.senders import request, sender_for


@dataclass
class Answering:
    """What the server answers, and how many exports it saw."""

    body: bytes = b""
    gzipped: bool = False
    posts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def collector() -> Iterator[tuple[str, Answering]]:
    answering = Answering()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with answering.lock:
                answering.posts += 1
            body = gzip.compress(answering.body) if answering.gzipped else answering.body
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            if answering.gzipped:
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            # the sender may stop reading: what the cap is for
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1/traces", answering
    finally:
        server.shutdown()
        server.server_close()


def send_one(endpoint: str) -> Delivery:
    target = ExportTarget(kind="otlp", endpoint=endpoint, protocol="http/protobuf", timeout=10.0)
    sender = sender_for(target)
    try:
        return deliver([request()], lambda _: request(), sender.send)
    finally:
        sender.shutdown()


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_an_answer_over_the_cap_fails_the_export_without_a_retry(
    collector: tuple[str, Answering], gzipped: bool, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint, answering = collector
    answering.body, answering.gzipped = b"\0" * (MAX_RESPONSE_BYTES + 1), gzipped
    assert send_one(endpoint) == Delivery(exported=0, failed=1)
    assert answering.posts == 1  # not retried
    assert any("body over" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_an_answer_at_the_cap_is_read(collector: tuple[str, Answering], gzipped: bool) -> None:
    endpoint, answering = collector
    # an empty ExportTraceServiceResponse padded with an unknown field up to the cap
    answering.body, answering.gzipped = padded_response(MAX_RESPONSE_BYTES), gzipped
    assert send_one(endpoint) == Delivery(exported=1)
    assert answering.posts == 1


def sdk_export(endpoint: str) -> SpanExportResult:
    target = ExportTarget(kind="otlp", endpoint=endpoint, protocol="http/protobuf", timeout=10.0)
    exporter = make_span_exporter(target, role="worker")
    provider = TracerProvider()
    with provider.get_tracer("task code").start_as_current_span("work") as span:
        pass
    try:
        return exporter.export([span])  # type: ignore[list-item]
    finally:
        exporter.shutdown()


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_the_sdk_exporters_read_answers_up_to_the_cap_too(
    collector: tuple[str, Answering], gzipped: bool
) -> None:
    endpoint, answering = collector
    answering.body, answering.gzipped = b"\0" * (MAX_RESPONSE_BYTES + 1), gzipped
    assert sdk_export(endpoint) == SpanExportResult.FAILURE
    assert answering.posts == 1  # not retried
    answering.body = padded_response(MAX_RESPONSE_BYTES)
    assert sdk_export(endpoint) == SpanExportResult.SUCCESS


def padded_response(size: int) -> bytes:
    """An ``ExportTraceServiceResponse`` of exactly ``size`` bytes: field 15 (unknown,
    skipped by the parser) holding the padding."""
    tag = bytes([15 << 3 | 2])
    payload = size - len(tag)
    for length_bytes in range(1, 6):
        data = payload - length_bytes
        varint = bytearray()
        value = data
        while value >= 0x80:
            varint.append(value & 0x7F | 0x80)
            value >>= 7
        varint.append(value)
        if len(varint) == length_bytes:
            return tag + bytes(varint) + b"\0" * data
    raise AssertionError(size)
