"""The scheduler's senders answer a collector as the OTLP exporter specification asks:
partial success counted as rejected, RetryInfo and Retry-After (an HTTP date too)
honoured, oversize batches split down to one record, no redirects, one immediate
retry on a closed kept-alive connection. Each against the loopback receiver made to
answer that way, over gRPC and HTTP."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

import pytest
from distributed import span

from otel_spans.config import RecordLimits
from otel_spans.export import wire as otlp_wire
from otel_spans.export.http_sender import retry_after_seconds
from otel_spans.export.outcome import Delivery, Sent, deliver
from tests.servers.otlp_http import THROTTLE_SECONDS
from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.cluster import await_until, cluster_test, stats, traced_cluster
from tests.support.senders import PROTOCOLS, request, sender_for, target


def encode(names: Sequence[str]) -> bytes:
    spans = [
        otlp_wire.span(
            name=name,
            trace_id=1,
            span_id=i + 1,
            parent_span_id=0,
            start_ns=1,
            end_ns=2,
            attributes={"payload": "x" * (20_000 if name == "giant" else 2000)},
            limits=RecordLimits(attribute_length=50_000),
        )
        for i, name in enumerate(names)
    ]
    return otlp_wire.RequestEncoder({"service.name": "dask"}, "otel_spans").request(spans)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_partial_success_is_counted_as_rejected_and_logged(
    receiver: OtlpReceiver, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.partial = (1, "span 'x' has an invalid attribute")
    sender = sender_for(target(receiver, protocol))
    try:
        with caplog.at_level(logging.WARNING, logger="otel_spans"):
            sent = sender.send(request())
    finally:
        sender.shutdown()
    assert sent.ok and sent.rejected == 1
    (warning,) = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
    assert "invalid attribute" in warning and "1 spans" in warning


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_plain_success_rejects_nothing(receiver: OtlpReceiver, protocol: str) -> None:
    sender = sender_for(target(receiver, protocol))
    try:
        sent = sender.send(request())
    finally:
        sender.shutdown()
    assert sent.ok and sent.rejected == 0 and not sent.too_large


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_server_says_when_to_retry(receiver: OtlpReceiver, protocol: str) -> None:
    """gRPC RetryInfo / HTTP Retry-After as a date: the retry waits that long, not the
    default back-off (about 1 s), then succeeds."""
    receiver.set_mode("throttle")
    sender = sender_for(target(receiver, protocol, timeout=30.0))
    started = time.monotonic()
    try:
        result: list[bool] = []
        thread = threading.Thread(target=lambda: result.append(bool(sender.send(request()))))
        thread.start()
        receiver.wait_for_attempts("traces", 1)
        receiver.set_mode("ok")
        thread.join(30)
    finally:
        sender.shutdown()
    waited = time.monotonic() - started
    assert result == [True]
    assert receiver.attempts("traces") == 2
    # an HTTP date has 1 s resolution: the wait is THROTTLE_SECONDS minus up to 1 s
    assert waited >= THROTTLE_SECONDS - 1.05, waited


def test_a_request_too_large_for_grpc_asks_for_a_split_not_a_retry() -> None:
    """gRPC's own RESOURCE_EXHAUSTED "message larger than max" is about the size: no
    retry of the same bytes (they would fail again), the caller splits the batch."""
    rx = OtlpReceiver(max_receive_message_length=10_000)
    with rx:
        sender = sender_for(target(rx, "grpc"))
        try:
            sent = sender.send(encode(["a"] * 20))  # ~40 kB: over the receiver's max
        finally:
            sender.shutdown()
        attempts = rx.attempts("traces")
    assert not sent.ok and sent.too_large
    assert attempts == 0  # refused by gRPC itself before the servicer, and not retried
    assert not rx.spans()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_oversize_batch_is_split_down_to_what_fits(protocol: str) -> None:
    """A collector taking at most ~10 kB: 16 spans of ~2 kB go in halves; a span too
    large alone is dropped and counted; everything else arrives once."""
    rx = OtlpReceiver(max_receive_message_length=10_000)
    with rx:
        sender = sender_for(target(rx, protocol))
        names = [f"s{i}" for i in range(16)]
        try:
            delivery = deliver([*names, "giant"], encode, sender.send)
        finally:
            sender.shutdown()
        arrived = sorted(s.name for s in rx.spans())
    assert delivery == Delivery(exported=16, too_large=1)
    assert arrived == sorted(names)


def test_our_own_cap_splits_before_sending(receiver: OtlpReceiver) -> None:
    sender = sender_for(target(receiver, "grpc"))
    sizes: list[int] = []

    def send(body: bytes) -> Sent:
        sizes.append(len(body))
        return sender.send(body)

    try:
        delivery = deliver([f"s{i}" for i in range(8)], encode, send, max_bytes=5_000)
    finally:
        sender.shutdown()
    assert delivery == Delivery(exported=8)
    assert sizes and max(sizes) <= 5_000
    assert len(receiver.spans()) == 8


def test_http_redirects_are_not_followed(
    receiver: OtlpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.set_mode("redirect")
    sender = sender_for(target(receiver, "http/protobuf"))
    try:
        with caplog.at_level(logging.WARNING, logger="otel_spans"):
            sent = sender.send(request())
    finally:
        sender.shutdown()
    assert not sent.ok
    assert receiver.attempts("traces") == 1  # neither followed nor retried
    assert any("redirect" in r.getMessage() for r in caplog.records)


def test_a_closed_keep_alive_connection_is_retried_at_once(receiver: OtlpReceiver) -> None:
    sender = sender_for(target(receiver, "http/protobuf"))
    try:
        assert sender.send(request("first"))  # a kept-alive connection now exists
        receiver.set_mode("drop_once")
        started = time.monotonic()
        sent = sender.send(request("second"))
        waited = time.monotonic() - started
    finally:
        sender.shutdown()
    assert sent.ok
    assert [s.name for s in receiver.spans()] == ["first", "second"]
    assert waited < 0.7, waited  # no back-off (the first one is 0.8–1.2 s)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("3", 3.0),
        ("0", 0.0),
        ("-4", 0.0),
        ("Wed, 21 Oct 2015 07:28:05 GMT", 5.0),  # 5 s after "now" below
        ("Wed, 21 Oct 2015 07:27:55 GMT", 0.0),  # in the past
        ("soon", 0.0),
        (None, 0.0),
    ],
)
def test_retry_after_reads_seconds_and_http_dates(header: str | None, expected: float) -> None:
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert retry_after_seconds(header, now=now) == pytest.approx(expected)


@cluster_test(timeout=60)
async def test_the_scheduler_counts_what_the_collector_rejected(
    receiver: OtlpReceiver,
) -> None:
    """Every accepted request is answered "1 span rejected": the scheduler's counters
    say so (rejected, in spans) instead of counting everything as exported."""
    receiver.partial = (1, "one span rejected")
    config = {"otel-spans.endpoint": receiver.grpc_endpoint, "otel-spans.logs.exporter": "none"}
    async with traced_cluster(config) as (client, _, _):
        with span("partially accepted"):
            assert await client.submit(lambda: 1) == 1
        await await_until(lambda: receiver.spans(), 30, "no span arrived")

        async def counted() -> dict[str, int] | None:
            traces = (await stats(client))["traces"]
            return traces if traces["rejected"] and not traces["queued"] else None

        traces = await await_until(counted, 30, "no rejection counted")
    requests = len(receiver.requests("traces"))
    assert traces["rejected"] == requests  # one per accepted request, as answered
    assert traces["exported"] >= 1 and traces["failed"] == traces["too_large"] == 0
