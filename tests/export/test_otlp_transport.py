"""The scheduler's request sender against a real loopback OTLP receiver, both protocols.

Retries follow the OTLP exporter specification: retryable answers are retried with
back-off until the export's timeout, the others fail at once, and shutdown aborts a
back-off. Checked by what reached the receiver, not by mocks.
"""

from __future__ import annotations

import math
import threading
import time

import pytest

from otel_spans.config import ExportTarget, RecordLimits, Settings
from otel_spans.export import log_wire
from otel_spans.export import wire as otlp_wire
from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.fresh_python import fresh_python
from tests.support.senders import PROTOCOLS, request, sender_for, target


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("compression", [None, "gzip"])
def test_delivers_with_headers_and_compression(
    receiver: OtlpReceiver, protocol: str, compression: str | None
) -> None:
    sender = sender_for(target(receiver, protocol, compression=compression))
    try:
        assert sender.send(request("hello"))
    finally:
        sender.shutdown()
    (span,) = receiver.spans()
    assert span.name == "hello" and span.attributes == {"k": "v"}
    assert receiver.headers("traces")[0]["x-tenant"] == "t1"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_log_requests_reach_the_logs_service(receiver: OtlpReceiver, protocol: str) -> None:
    record = log_wire.log_record(
        time_ns=5,
        severity_number=9,
        severity_text="INFO",
        body={"action": "add-worker", "nested": [1, b"\x00", None]},
        attributes={"dask.event.topic": "scheduler"},
        limits=RecordLimits(),
        trace_id=7,
        span_id=8,
        event_name="dask.event",
    )
    body = otlp_wire.RequestEncoder({"service.name": "dask"}, "otel_spans").request([record])
    sender = sender_for(target(receiver, protocol, "logs"), "logs")
    try:
        assert sender.send(body)
    finally:
        sender.shutdown()
    (log,) = receiver.logs()
    assert log.body == {"action": "add-worker", "nested": [1, b"\x00", None]}
    assert (log.trace_id, log.span_id) == (f"{7:032x}", f"{8:016x}")
    assert receiver.spans() == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_retryable_answers_are_retried_until_accepted(
    receiver: OtlpReceiver, protocol: str
) -> None:
    receiver.set_mode("unavailable")
    sender = sender_for(target(receiver, protocol))
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(bool(sender.send(request()))))
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
    sender = sender_for(target(receiver, protocol))
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
    sender = sender_for(target(receiver, protocol, timeout=1.0))
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
    sender = sender_for(target(receiver, protocol, timeout=60.0))
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(bool(sender.send(request()))))
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
    sender = sender_for(ExportTarget(kind="file", directory=directory))
    assert sender.send(request("to file"))
    (written,) = directory.glob("traces-t-*.jsonl")
    assert '"name":"to file"' in written.read_text()
    record = log_wire.log_record(
        time_ns=5, severity_number=9, severity_text="INFO", body="logged", attributes={},
        limits=RecordLimits(),
    )  # fmt: skip
    logs = otlp_wire.RequestEncoder({}, "otel_spans").request([record])
    assert sender_for(ExportTarget(kind="file", directory=directory), "logs").send(logs)
    (written,) = directory.glob("logs-t-*.jsonl")
    assert '"stringValue":"logged"' in written.read_text()
    assert sender_for(ExportTarget(kind="none")).send(request())


def test_a_hand_built_grpc_target_with_a_password_sends_and_never_shows_it(
    receiver: OtlpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Configuration strips ``user:password@`` from gRPC endpoints; an ExportTarget built
    by hand skips that. The sender still dials the bare address (the delivery proves it:
    ``user:…@host:port`` is no address gRPC can resolve) and no log line shows the
    password. Wrong code caught: dialling ``url.netloc`` as it is."""
    scheme, _, rest = receiver.grpc_endpoint.partition("://")
    endpoint = f"{scheme}://otel:hunter2-secret@{rest}"
    sender = sender_for(target(receiver, "grpc", endpoint=endpoint, timeout=5.0))
    try:
        assert sender.send(request("hello"))
        receiver.set_mode("reject")
        assert not sender.send(request("refused"))
    finally:
        sender.shutdown()
    assert [s.name for s in receiver.spans()] == ["hello"]
    assert "hunter2-secret" not in caplog.text
    assert "hunter2-secret" not in repr(sender)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_timeout_of_zero_is_no_limit_and_still_delivers(
    receiver: OtlpReceiver, protocol: str
) -> None:
    """``OTEL_EXPORTER_OTLP_TIMEOUT=0``: no limit (``math.inf`` in the settings), which
    the transports get as a number they accept."""
    base = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
    settings = Settings.from_config(
        {"endpoint": base, "protocol": protocol}, environ={"OTEL_EXPORTER_OTLP_TIMEOUT": "0"}
    )
    assert settings.traces.target.timeout == math.inf
    sender = sender_for(settings.traces.target)
    try:
        assert sender.send(request("unbounded"))
    finally:
        sender.shutdown()
    assert [s.name for s in receiver.spans()] == ["unbounded"]


def test_a_grpc_endpoint_without_a_scheme_is_sent_to(receiver: OtlpReceiver) -> None:
    """``host:port`` for gRPC, ``insecure`` true: plain text to that host and port."""
    host_port = receiver.grpc_endpoint.split("://", 1)[1]
    settings = Settings.from_config(
        {},
        environ={"OTEL_EXPORTER_OTLP_ENDPOINT": host_port, "OTEL_EXPORTER_OTLP_INSECURE": "true"},
    )
    assert settings.traces.target.endpoint == f"http://{host_port}"
    sender = sender_for(settings.traces.target)
    try:
        assert sender.send(request("scheme-less"))
    finally:
        sender.shutdown()
    assert [s.name for s in receiver.spans()] == ["scheme-less"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_sdk_exporters_send_our_user_agent(receiver: OtlpReceiver, protocol: str) -> None:
    """Worker spans and metrics go through the OTel SDK's exporters, which would send
    the SDK's own user agent (``OTel-OTLP-Exporter-Python/...``); they send ours, as
    our senders do (gRPC adds its own after it). Wrong code caught: the SDK default."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from otel_spans.export.otlp_retry import user_agent
    from otel_spans.export.sdk import make_span_exporter

    provider = TracerProvider()
    provider.add_span_processor(
        SimpleSpanProcessor(make_span_exporter(target(receiver, protocol), role="t"))
    )
    provider.get_tracer("t").start_span("hello").end()
    provider.shutdown()
    (headers,) = receiver.headers("traces")
    assert str(headers["user-agent"]).startswith(user_agent()), headers["user-agent"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_sdk_span_exporter_is_built_by_its_first_export(
    receiver: OtlpReceiver, protocol: str
) -> None:
    """A worker whose tasks start no span never imports the SDK's OTLP span exporter
    nor opens its channel; one that does exports as before. Wrong code caught: the
    exporter built with the worker."""

    tgt = target(receiver, protocol)
    code = (
        "import sys\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from otel_spans.export.sdk import make_span_exporter\n"
        "from otel_spans.settings import ExportTarget\n"
        f"t = ExportTarget(kind='otlp', endpoint={tgt.endpoint!r}, protocol={protocol!r})\n"
        "idle = make_span_exporter(t, role='worker')\n"
        "idle.shutdown()\n"
        "assert not idle.export([]).name == 'SUCCESS'\n"  # closed: nothing built for it
        "print(sorted(m for m in sys.modules if 'trace_exporter' in m or m.endswith('_pb2')))\n"
        "provider = TracerProvider()\n"
        "provider.add_span_processor(SimpleSpanProcessor(make_span_exporter(t, role='w')))\n"
        "provider.get_tracer('t').start_span('hello').end()\n"
        "provider.shutdown()\n"
    )
    out = fresh_python(code)
    assert out.stdout.strip() == "[]", out.stdout
    assert [s.name for s in receiver.spans()] == ["hello"]
