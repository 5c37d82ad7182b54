"""Tests of the test servers themselves, driven by the real OTel SDK exporters.

If these fail, every integration test built on them is meaningless, so they
check the parts other tests rely on: decoded ids/parents/attributes, both
transports, auth headers, fault modes, TLS, rotel forwarding and restarts,
and Prometheus answering PromQL about what it scraped.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import grpc
import pytest
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
    OTLPMetricExporter as GrpcMetricExporter,
)
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
    OTLPMetricExporter as HttpMetricExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from tests.servers.fixtures import PrometheusFactory
from tests.servers.otlp_fanout import OtlpFanout
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.ports import free_port, wait_for_port, wait_until
from tests.servers.prometheus import (
    OPENMETRICS_CONTENT_TYPE,
    ExpositionServer,
    OtlpUnsupportedError,
    PrometheusServer,
    prometheus_capabilities,
    promtool_check_config,
    promtool_check_metrics,
    sample_value,
)
from tests.servers.rotel import ROTEL_AGENT_VERSION, RotelCollector, rotel_binary
from tests.support.requirements import require_module

Transport = Literal["grpc", "http"]
RESOURCE = Resource.create({"service.name": "otel-spans-test", "deployment.environment": "ci"})
AUTH = "Bearer s3cret"


def span_exporter(rx_endpoint: str, transport: Transport, timeout: float = 5.0) -> SpanExporter:
    """An SDK span exporter of *transport* pointed at an endpoint base URL."""
    if transport == "grpc":
        return GrpcSpanExporter(
            endpoint=rx_endpoint, insecure=True, headers={"authorization": AUTH}, timeout=timeout
        )
    return HttpSpanExporter(
        endpoint=f"{rx_endpoint}/v1/traces",
        headers={"authorization": AUTH},
        compression=Compression.Gzip,
        timeout=timeout,
    )


def endpoint_for(rx: OtlpReceiver, transport: Transport) -> str:
    return rx.grpc_endpoint if transport == "grpc" else rx.http_endpoint


def make_spans() -> list[ReadableSpan]:
    """A parent/child pair with every attribute type, an event, a link, a status."""
    provider = TracerProvider(resource=RESOURCE)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("otel_spans.tests", "1.2.3")
    with tracer.start_as_current_span("linked-to") as other:
        pass
    with tracer.start_as_current_span(
        "parent",
        kind=SpanKind.SERVER,
        attributes={
            "s": "x",
            "i": 7,
            "f": 1.5,
            "b": True,
            "strs": ["a", "b"],
            "ints": [1, 2],
        },
        links=[Link(other.get_span_context(), {"why": "because"})],
    ) as parent:
        with tracer.start_as_current_span("child") as child:
            child.add_event("something", {"n": 3})
            child.set_status(Status(StatusCode.ERROR, "boom"))
        parent.set_attribute("late", "yes")
    provider.shutdown()
    return list(memory.get_finished_spans())


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_span_roundtrip(otlp_receiver: OtlpReceiver, transport: Transport) -> None:
    spans = make_spans()
    exporter = span_exporter(endpoint_for(otlp_receiver, transport), transport)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    exporter.shutdown()

    got = {s.name: s for s in otlp_receiver.wait_for_spans(3)}
    sent = {s.name: s for s in spans}
    parent, child = got["parent"], got["child"]
    assert parent.trace_id == format(sent["parent"].context.trace_id, "032x")
    assert parent.span_id == format(sent["parent"].context.span_id, "016x")
    assert parent.parent_span_id == ""
    assert child.parent_span_id == parent.span_id
    assert child.trace_id == parent.trace_id
    assert parent.kind == trace_pb2.Span.SPAN_KIND_SERVER
    assert parent.attributes == {
        "s": "x",
        "i": 7,
        "f": 1.5,
        "b": True,
        "strs": ["a", "b"],
        "ints": [1, 2],
        "late": "yes",
    }
    assert parent.links == [
        # flags as the SDK encodes a link to a local span context: "is-remote known"
        (got["linked-to"].trace_id, got["linked-to"].span_id, {"why": "because"}, 0x100)
    ]
    assert [(e.name, e.attributes) for e in child.events] == [("something", {"n": 3})]
    assert child.status_code == trace_pb2.Status.STATUS_CODE_ERROR
    assert child.status_message == "boom"
    assert parent.resource["service.name"] == "otel-spans-test"
    assert parent.scope_name == "otel_spans.tests"
    assert parent.scope_version == "1.2.3"
    assert parent.start_ns == sent["parent"].start_time
    assert parent.end_ns == sent["parent"].end_time
    assert {s.transport for s in got.values()} == {transport}

    (headers,) = otlp_receiver.headers("traces")
    assert headers["authorization"] == AUTH
    if transport == "http":
        assert headers["content-encoding"] == "gzip"
        assert headers["content-type"] == "application/x-protobuf"


def test_metrics_over_grpc_and_logs_over_http(otlp_receiver: OtlpReceiver) -> None:
    provider = TracerProvider(resource=RESOURCE)
    tracer = provider.get_tracer("t")
    reader = PeriodicExportingMetricReader(
        GrpcMetricExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True),
        export_interval_millis=3_600_000,  # only our force_flush exports
    )
    meters = MeterProvider(metric_readers=[reader], resource=RESOURCE)
    meter = meters.get_meter("otel_spans.tests")
    counter = meter.create_counter("test.requests", unit="1", description="reqs")
    histogram = meter.create_histogram("test.duration", unit="s")
    logs = LoggerProvider(resource=RESOURCE)
    logs.add_log_record_processor(
        SimpleLogRecordProcessor(HttpLogExporter(endpoint=f"{otlp_receiver.http_endpoint}/v1/logs"))
    )
    logger = logs.get_logger("otel_spans.tests")

    with tracer.start_as_current_span("ctx") as span:
        counter.add(3, {"path": "/a"})  # sampled span => exemplar
        logger.emit(
            severity_number=SeverityNumber.WARN,
            severity_text="WARN",
            body="hello",
            attributes={"k": "v"},
            event_name="otel_spans.test_event",
        )
    histogram.record(0.25, {"path": "/a"})
    histogram.record(4.0, {"path": "/a"})
    meters.shutdown()  # exports once; force_flush() + shutdown() would export twice
    logs.shutdown()
    provider.shutdown()

    trace_id = format(span.get_span_context().trace_id, "032x")
    (req,) = otlp_receiver.wait_for_metrics(lambda p: p.name == "test.requests")
    assert (req.kind, req.value, req.is_monotonic, req.temporality) == ("sum", 3, True, 2)
    assert (req.unit, req.description, req.attributes) == ("1", "reqs", {"path": "/a"})
    assert [(e["trace_id"], e["value"]) for e in req.exemplars] == [(trace_id, 3)]
    (dur,) = otlp_receiver.wait_for_metrics(lambda p: p.name == "test.duration")
    assert dur.kind == "histogram"
    assert dur.value["count"] == 2
    assert dur.value["sum"] == pytest.approx(4.25)
    assert sum(dur.value["bucket_counts"]) == 2
    assert len(dur.value["bucket_counts"]) == len(dur.value["explicit_bounds"]) + 1

    (log,) = otlp_receiver.wait_for_logs(1)
    assert (log.body, log.severity_number, log.severity_text) == ("hello", 13, "WARN")
    assert (log.trace_id, log.attributes, log.transport) == (trace_id, {"k": "v"}, "http")
    assert log.event_name == "otel_spans.test_event"
    assert log.resource["service.name"] == "otel-spans-test"


def test_the_fanout_forwards_each_request_to_every_target_unchanged() -> None:
    """What tests/deploy/test_backends.py relies on to feed three Prometheus servers
    from the collector's one metrics endpoint: gzip bodies arrive decoded alike, the
    exporter gets the first target's answer, a refusal is recorded."""
    with OtlpReceiver() as first, OtlpReceiver() as second, OtlpReceiver() as refusing:
        refusing.set_mode("reject")
        targets = [first.http_endpoint, second.http_endpoint, refusing.http_endpoint]
        with OtlpFanout(targets) as fanout:
            exporter = HttpMetricExporter(
                endpoint=f"{fanout.endpoint}/v1/metrics", compression=Compression.Gzip
            )
            reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
            meters = MeterProvider(metric_readers=[reader], resource=RESOURCE)
            meters.get_meter("otel_spans.tests").create_counter("test.fanned", unit="1").add(2)
            meters.shutdown()  # exports once, answered by the first target: success
            for rx in (first, second):
                (point,) = rx.wait_for_metrics(lambda p: p.name == "test.fanned")
                assert point.value == 2
            (failure,) = fanout.failures
    assert failure.startswith(f"{refusing.http_endpoint}/v1/metrics: HTTP 400")


def test_http_accepts_otlp_json_with_hex_ids(otlp_receiver: OtlpReceiver) -> None:
    body = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "4bf92f3577b34da6a3ce929d0e0e4736",
                                "spanId": "00f067aa0ba902b7",
                                "name": "json-span",
                                "kind": 3,
                                "startTimeUnixNano": "1",
                                "endTimeUnixNano": "2",
                                "attributes": [{"key": "k", "value": {"intValue": "5"}}],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    request = urllib.request.Request(
        f"{otlp_receiver.http_endpoint}/v1/traces",
        data=gzip.compress(json.dumps(body).encode()),
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as resp:
        assert resp.status == 200
    (span,) = otlp_receiver.spans()
    assert (span.trace_id, span.span_id, span.kind) == (
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "00f067aa0ba902b7",
        3,
    )
    assert span.attributes == {"k": 5}


@pytest.mark.parametrize("transport", ["grpc", "http"])
@pytest.mark.parametrize("mode", ["unavailable", "hang"])
def test_fault_modes_fail_the_exporter_within_its_timeout(
    otlp_receiver: OtlpReceiver, transport: Transport, mode: Literal["unavailable", "hang"]
) -> None:
    otlp_receiver.set_mode(mode)
    exporter = span_exporter(endpoint_for(otlp_receiver, transport), transport, timeout=1.0)
    started = time.monotonic()
    result = exporter.export(make_spans())
    elapsed = time.monotonic() - started
    exporter.shutdown()

    assert result == SpanExportResult.FAILURE
    assert elapsed < 3.0
    assert otlp_receiver.attempts("traces") >= 1
    assert otlp_receiver.spans() == []

    otlp_receiver.set_mode("ok")
    exporter = span_exporter(endpoint_for(otlp_receiver, transport), transport)
    assert exporter.export(make_spans()) == SpanExportResult.SUCCESS
    exporter.shutdown()
    assert len(otlp_receiver.wait_for_spans(3)) >= 3


def test_stop_does_not_block_on_a_hanging_request(otlp_receiver: OtlpReceiver) -> None:
    otlp_receiver.set_mode("hang")
    exporter = span_exporter(otlp_receiver.grpc_endpoint, "grpc", timeout=30.0)
    results: list[SpanExportResult] = []
    worker = threading.Thread(target=lambda: results.append(exporter.export(make_spans())))
    worker.start()
    otlp_receiver.wait_for_attempts("traces", 1)

    started = time.monotonic()
    otlp_receiver.stop()
    assert time.monotonic() - started < 3.0
    exporter.shutdown()
    worker.join(timeout=35.0)
    assert results == [SpanExportResult.FAILURE]


def test_receiver_restarts_on_the_same_ports(otlp_receiver: OtlpReceiver) -> None:
    grpc_endpoint, http_endpoint = otlp_receiver.grpc_endpoint, otlp_receiver.http_endpoint
    otlp_receiver.stop()
    otlp_receiver.start()
    assert (otlp_receiver.grpc_endpoint, otlp_receiver.http_endpoint) == (
        grpc_endpoint,
        http_endpoint,
    )
    exporter = span_exporter(http_endpoint, "http")
    assert exporter.export(make_spans()) == SpanExportResult.SUCCESS
    exporter.shutdown()


def test_mutual_tls_on_both_transports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_module("cryptography")
    # requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE override
    # Session.verify, i.e. the HTTP exporter's certificate_file (psf/requests
    # #3829); with either set, our test CA would be silently ignored.
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    from tests.servers.tls import make_test_pki

    pki = make_test_pki()
    files = pki.write(tmp_path)
    with OtlpReceiver(
        tls_cert=pki.server_cert, tls_key=pki.server_key, client_ca=pki.ca_cert
    ) as rx:
        assert rx.grpc_endpoint.startswith("https://")
        grpc_exporter = GrpcSpanExporter(
            endpoint=rx.grpc_endpoint,
            credentials=grpc.ssl_channel_credentials(
                root_certificates=pki.ca_cert,
                private_key=pki.client_key,
                certificate_chain=pki.client_cert,
            ),
        )
        http_exporter: SpanExporter = HttpSpanExporter(
            endpoint=f"{rx.http_endpoint}/v1/traces",
            certificate_file=str(files.ca_cert),
            client_certificate_file=str(files.client_cert),
            client_key_file=str(files.client_key),
        )
        spans = make_spans()
        assert grpc_exporter.export(spans) == SpanExportResult.SUCCESS
        assert http_exporter.export(spans) == SpanExportResult.SUCCESS
        grpc_exporter.shutdown()
        http_exporter.shutdown()
        assert {s.transport for s in rx.wait_for_spans(6)} == {"grpc", "http"}

        # Without a client certificate the handshake must fail.
        anonymous: SpanExporter = HttpSpanExporter(
            endpoint=f"{rx.http_endpoint}/v1/traces",
            certificate_file=str(files.ca_cert),
            timeout=1.0,
        )
        assert anonymous.export(spans) == SpanExportResult.FAILURE
        anonymous.shutdown()
        assert len(rx.spans()) == 6


def test_wait_until_fails_with_the_message() -> None:
    with pytest.raises(AssertionError, match="never true"):
        wait_until(lambda: False, timeout=0.1, message=lambda: "never true")
    assert wait_until(lambda: 42, timeout=0.1) == 42
    with pytest.raises(AssertionError, match="nothing is listening"):
        wait_for_port("127.0.0.1", free_port(), timeout=0.1)


# -- rotel --------------------------------------------------------------------


def test_sdk_to_rotel_to_receiver(otlp_receiver: OtlpReceiver, rotel: RotelCollector) -> None:
    assert rotel.pid is not None
    exporter = span_exporter(rotel.grpc_endpoint, "grpc")
    spans = make_spans()
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    exporter.shutdown()

    reader = PeriodicExportingMetricReader(
        HttpMetricExporter(endpoint=f"{rotel.http_endpoint}/v1/metrics"),
        export_interval_millis=3_600_000,
    )
    meters = MeterProvider(metric_readers=[reader], resource=RESOURCE)
    meters.get_meter("m").create_counter("via.rotel").add(5, {"k": "v"})
    meters.shutdown()

    got = {s.name: s for s in otlp_receiver.wait_for_spans(3, timeout=15)}
    assert got["child"].parent_span_id == got["parent"].span_id
    assert got["parent"].attributes["i"] == 7
    assert got["parent"].resource["service.name"] == "otel-spans-test"
    (point,) = otlp_receiver.wait_for_metrics(lambda p: p.name == "via.rotel", timeout=15)
    assert (point.value, point.attributes) == (5, {"k": "v"})
    # Our auth header went to rotel, not through it.
    assert all("authorization" not in h for h in otlp_receiver.headers("traces"))


def test_rotel_survives_kill_and_restart(
    otlp_receiver: OtlpReceiver, rotel: RotelCollector
) -> None:
    exporter = span_exporter(rotel.grpc_endpoint, "grpc", timeout=10.0)
    assert exporter.export(make_spans()) == SpanExportResult.SUCCESS
    otlp_receiver.wait_for_spans(3, timeout=15)

    old_pid = rotel.pid
    rotel.kill()
    assert not rotel.running and rotel.pid is None
    rotel.restart()
    assert rotel.pid not in (None, old_pid)

    # The same exporter (same channel) reconnects to the same address.
    assert exporter.export(make_spans()) == SpanExportResult.SUCCESS
    exporter.shutdown()
    otlp_receiver.wait_for_spans(6, timeout=15)


# -- Prometheus ---------------------------------------------------------------

EXPOSITION = """\
# HELP otel_spans_test_requests Requests served.
# TYPE otel_spans_test_requests counter
otel_spans_test_requests_total{path="/a"} 42 # {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 1.0
# EOF
"""


@pytest.fixture
def exposition() -> Iterator[ExpositionServer]:
    with ExpositionServer(EXPOSITION, OPENMETRICS_CONTENT_TYPE) as server:
        yield server


def test_prometheus_scrapes_and_answers_promql(
    prometheus: PrometheusFactory, exposition: ExpositionServer
) -> None:
    started = time.time()
    prom = prometheus([exposition.target])
    (result,) = prom.wait_for_query('otel_spans_test_requests_total{job="test"}')
    assert sample_value(result) == 42
    assert result["metric"]["path"] == "/a"
    assert exposition.scrape_count >= 1

    if prom.capabilities.exemplar_storage:
        (series,) = wait_until(
            lambda: prom.query_exemplars("otel_spans_test_requests_total", started, time.time()),
            message="no exemplar stored",
        )
        (exemplar,) = series["exemplars"]
        assert exemplar["labels"] == {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}


def test_the_prometheus_wrapper_knows_whether_it_takes_otlp(
    prometheus: PrometheusFactory,
) -> None:
    """Debian's Prometheus has its OTLP receiver patched out (deploy/ runs Prometheus 3,
    which has one): the wrapper says which, from the binary's own flags, and where there
    is a receiver a push arrives. The OTLP metrics path is proven against a real OTLP
    backend in tests/deploy/test_victoriametrics.py."""
    caps = prometheus_capabilities()
    prom = prometheus()
    if caps.otlp_flags is None:
        with pytest.raises(OtlpUnsupportedError):
            prom.otlp_endpoint  # noqa: B018
    else:
        endpoint = f"{prom.otlp_endpoint}/v1/metrics"
        exporter: MetricExporter = HttpMetricExporter(endpoint=endpoint)
        reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
        meters = MeterProvider(metric_readers=[reader], resource=RESOURCE)
        meters.get_meter("m").create_counter("otel_spans_pushed").add(9, {"k": "v"})
        meters.shutdown()
        (result,) = prom.wait_for_query('{__name__=~"otel_spans_pushed.*"}')
        assert sample_value(result) == 9


def test_promtool_checks(tmp_path: Path) -> None:
    server = PrometheusServer(["127.0.0.1:9"], scrape_interval="1s")
    try:
        ok, output = promtool_check_config(server.write_config())
        assert ok, output
    finally:
        server.close()
    broken = tmp_path / "broken.yml"
    broken.write_text("scrape_configs: [{job_name: x, scrape_interval: soon}]\n")
    assert not promtool_check_config(broken)[0]

    ok, output = promtool_check_metrics(
        "# HELP good_total Fine.\n# TYPE good_total counter\ngood_total 1\n"
    )
    assert ok, output
    ok, output = promtool_check_metrics("# HELP bad A counter.\n# TYPE bad counter\nbad 1\n")
    assert not ok and "_total" in output


def test_rotel_is_the_version_the_wrapper_was_written_for() -> None:
    """tests/servers/rotel.py works around one agent version's quirks (ports, URLs,
    logging, back-off); another version must be looked at before it is trusted."""
    out = subprocess.run(
        [rotel_binary(), "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert out.split() == ["rotel", ROTEL_AGENT_VERSION], out
