"""The scheduler's trace sender against a real loopback OTLP receiver, both protocols.

Retries follow the OTLP exporter specification: retryable answers are retried with
back-off until the export's timeout, the others fail at once, and shutdown aborts a
back-off. Checked by what reached the receiver, not by mocks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from otel_spans import otlp_wire
from otel_spans.config import ExportTarget, SpanLimits
from otel_spans.exporting import make_trace_sender
from tests.servers.otlp_receiver import OtlpReceiver

PROTOCOLS = ["grpc", "http/protobuf"]


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as rx:
        yield rx


def request(name: str = "sent") -> bytes:
    span = otlp_wire.span(
        name=name,
        trace_id=1,
        span_id=2,
        parent_span_id=0,
        start_ns=1,
        end_ns=2,
        attributes={"k": "v"},
        limits=SpanLimits(),
    )
    return otlp_wire.RequestEncoder({"service.name": "dask"}, "otel_spans").request([span])


def target(rx: OtlpReceiver, protocol: str, **overrides: object) -> ExportTarget:
    endpoint = rx.grpc_endpoint if protocol == "grpc" else rx.http_endpoint + "/v1/traces"
    fields: dict[str, object] = {
        "kind": "otlp",
        "endpoint": endpoint,
        "protocol": protocol,
        "timeout": 10.0,
        "headers": {"x-tenant": "t1"},
    }
    fields.update(overrides)
    return ExportTarget(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("compression", [None, "gzip"])
def test_delivers_with_headers_and_compression(
    receiver: OtlpReceiver, protocol: str, compression: str | None
) -> None:
    sender = make_trace_sender(target(receiver, protocol, compression=compression), role="t")
    try:
        assert sender.send(request("hello"))
    finally:
        sender.shutdown()
    (span,) = receiver.spans()
    assert span.name == "hello" and span.attributes == {"k": "v"}
    assert receiver.headers("traces")[0]["x-tenant"] == "t1"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_retryable_answers_are_retried_until_accepted(
    receiver: OtlpReceiver, protocol: str
) -> None:
    receiver.set_mode("unavailable")
    sender = make_trace_sender(target(receiver, protocol), role="t")
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(sender.send(request())))
    thread.start()
    try:
        receiver.wait_for_attempts("traces", 2)
        receiver.set_mode("ok")
        thread.join(10)
    finally:
        sender.shutdown()
    assert result == [True]
    assert len(receiver.spans()) == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_refusal_is_not_retried(receiver: OtlpReceiver, protocol: str) -> None:
    receiver.set_mode("reject")
    sender = make_trace_sender(target(receiver, protocol), role="t")
    try:
        assert not sender.send(request())
    finally:
        sender.shutdown()
    assert receiver.attempts("traces") == 1
    assert receiver.spans() == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_timeout_bounds_an_export_to_a_hanging_collector(
    receiver: OtlpReceiver, protocol: str
) -> None:
    receiver.set_mode("hang")
    sender = make_trace_sender(target(receiver, protocol, timeout=1.0), role="t")
    started = time.monotonic()
    try:
        assert not sender.send(request())
    finally:
        receiver.set_mode("ok")
        sender.shutdown()
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_shutdown_aborts_the_back_off(receiver: OtlpReceiver, protocol: str) -> None:
    receiver.set_mode("unavailable")
    sender = make_trace_sender(target(receiver, protocol, timeout=60.0), role="t")
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(sender.send(request())))
    thread.start()
    receiver.wait_for_attempts("traces", 2)  # now in a 2 s back-off
    stopped = time.monotonic()
    sender.shutdown()
    thread.join(5)
    assert result == [False]
    assert time.monotonic() - stopped < 1


def test_file_and_none_targets(tmp_path: object) -> None:
    from pathlib import Path

    directory = Path(str(tmp_path))
    sender = make_trace_sender(ExportTarget(kind="file", directory=directory), role="t")
    assert sender.send(request("to file"))
    (written,) = directory.glob("traces-t-*.jsonl")
    assert '"name":"to file"' in written.read_text()
    assert make_trace_sender(ExportTarget(kind="none"), role="t").send(request())
