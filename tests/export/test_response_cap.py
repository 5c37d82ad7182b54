"""A collector's HTTP answer is read up to 4 MiB after decompression, never further.

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

from otel_spans.export.http_sender import MAX_RESPONSE_BYTES
from otel_spans.export.outcome import Delivery, deliver
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
