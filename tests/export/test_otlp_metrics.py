"""The scheduler's own OTLP metric exporter against a real loopback OTLP receiver.

The SDK's metric reader drives it; the requests are ours (:mod:`otel_spans.export.
metrics_wire`) and go through the same senders as spans and logs. Checked by what
reached the receiver's metrics service: the path or gRPC method, headers, compression,
counting, partial success, and that closing leaves no channel behind.
"""

from __future__ import annotations

import threading
import time

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    InMemoryMetricReader,
    MetricExportResult,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource

from otel_spans.export.otlp_metrics import OtlpMetricExporter
from otel_spans.export.otlp_retry import user_agent
from otel_spans.export.sdk import CountingMetricExporter, make_metric_exporter
from otel_spans.settings import ExportTarget
from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.fresh_python import fresh_python
from tests.support.senders import PROTOCOLS, target


def _exporter(tgt: ExportTarget, temporality: str = "cumulative") -> CountingMetricExporter:
    inner = make_metric_exporter(tgt, temporality, role="t")  # type: ignore[arg-type]
    assert isinstance(inner, OtlpMetricExporter)
    return CountingMetricExporter(inner)


def _provider(exporter: CountingMetricExporter) -> MeterProvider:
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    return MeterProvider(resource=Resource({"service.name": "dask"}), metric_readers=[reader])


def _record(provider: MeterProvider) -> None:
    meter = provider.get_meter("otel_spans", "1.2", schema_url="https://s")
    meter.create_counter("tasks", unit="{task}").add(3, {"prefix": "inc"})
    meter.create_histogram("seconds", unit="s").record(0.25, {"prefix": "inc"})
    meter.create_up_down_counter("open").add(-2)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("compression", [None, "gzip"])
def test_metrics_reach_the_metrics_service_counted(
    receiver: OtlpReceiver, protocol: str, compression: str | None
) -> None:
    exporter = _exporter(target(receiver, protocol, "metrics", compression=compression))
    provider = _provider(exporter)
    _record(provider)
    provider.shutdown()  # the final collection and export
    points = {p.name: p for p in receiver.metrics()}
    assert points["tasks"].value == 3 and points["tasks"].is_monotonic
    assert points["tasks"].attributes == {"prefix": "inc"} and points["tasks"].unit == "{task}"
    assert points["tasks"].temporality == 2 and points["tasks"].resource["service.name"] == "dask"
    assert points["seconds"].value["count"] == 1 and points["seconds"].value["sum"] == 0.25
    assert points["open"].value == -2 and not points["open"].is_monotonic
    (headers,) = receiver.headers("metrics")
    assert headers["x-tenant"] == "t1"
    assert str(headers["user-agent"]).startswith(user_agent())
    assert receiver.spans() == [] and receiver.logs() == []
    assert (exporter.counts.exported, exporter.counts.failed) == (1, 0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_delta_temporality_is_what_the_reader_asked_for(
    receiver: OtlpReceiver, protocol: str
) -> None:
    provider = _provider(_exporter(target(receiver, protocol, "metrics"), "delta"))
    _record(provider)
    provider.shutdown()
    assert {p.name: p.temporality for p in receiver.metrics()}["tasks"] == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_partial_success_is_an_export_with_rejected_points(
    receiver: OtlpReceiver, protocol: str
) -> None:
    receiver.partial = (2, "too many series")
    exporter = _exporter(target(receiver, protocol, "metrics"))
    provider = _provider(exporter)
    _record(provider)
    provider.shutdown()
    assert (exporter.counts.exported, exporter.counts.failed) == (1, 0)
    assert isinstance(exporter.inner, OtlpMetricExporter)
    assert exporter.inner.rejected_points == 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_refused_export_is_counted_failed(receiver: OtlpReceiver, protocol: str) -> None:
    receiver.set_mode("reject")
    exporter = _exporter(target(receiver, protocol, "metrics"))
    provider = _provider(exporter)
    _record(provider)
    provider.shutdown()
    assert (exporter.counts.exported, exporter.counts.failed) == (0, 1)
    assert receiver.attempts("metrics") == 1


def test_the_readers_timeout_bounds_an_export(receiver: OtlpReceiver) -> None:
    """The export's own ``timeout_millis`` wins over a longer target timeout (the
    scheduler's close gives the final export a share of its deadline)."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=Resource({"service.name": "dask"}), metric_readers=[reader])
    _record(provider)
    data = reader.get_metrics_data()
    provider.shutdown()
    assert data is not None
    receiver.set_mode("hang")
    exporter = _exporter(target(receiver, "grpc", "metrics", timeout=30.0))
    started = time.monotonic()
    try:
        assert exporter.export(data, timeout_millis=500) == MetricExportResult.FAILURE
    finally:
        receiver.set_mode("ok")
        exporter.shutdown()
    assert time.monotonic() - started < 3
    assert exporter.counts.failed == 1


def test_shutdown_closes_the_grpc_channel(receiver: OtlpReceiver) -> None:
    exporter = _exporter(target(receiver, "grpc", "metrics"))
    threads = set(threading.enumerate())
    provider = _provider(exporter)
    _record(provider)
    provider.shutdown()
    assert receiver.metrics()
    sender = exporter.inner.sender  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="closed channel"):
        sender._call(b"", timeout=1)
    # the receiver's own request threads aside ("otlp-grpc_N")
    left = {t for t in set(threading.enumerate()) - threads if not t.name.startswith("otlp-")}
    assert left == set()


def test_an_empty_collection_opens_no_connection(receiver: OtlpReceiver) -> None:
    exporter = _exporter(target(receiver, "grpc", "metrics"))
    provider = _provider(exporter)
    provider.shutdown()  # nothing recorded: nothing to send
    assert receiver.attempts("metrics") == 0
    assert exporter.inner.sender._shared is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_generated_protobuf_module_is_imported(receiver: OtlpReceiver, protocol: str) -> None:
    """The SDK's OTLP exporters and the generated protobuf classes are thousands of
    objects every full collection of the scheduler walks: exporting metrics to a
    collector, answer included, imports none of them. Wrong code caught: the SDK's
    metric exporter, an encoder or a response class imported on the way."""
    tgt = target(receiver, protocol, "metrics")
    receiver.partial = (1, "one")  # the answer is read too
    code = (
        "import sys\n"
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader\n"
        "from otel_spans.export.sdk import CountingMetricExporter, make_metric_exporter\n"
        "from otel_spans.settings import ExportTarget\n"
        f"t = ExportTarget(kind='otlp', endpoint={tgt.endpoint!r}, protocol={protocol!r})\n"
        "e = CountingMetricExporter(make_metric_exporter(t, 'cumulative', role='t'))\n"
        "p = MeterProvider(metric_readers=[PeriodicExportingMetricReader(e, 3_600_000)])\n"
        "p.get_meter('m').create_counter('c').add(1)\n"
        "p.shutdown()\n"
        "assert e.counts.exported == 1 and e.inner.rejected_points == 1\n"
        "print(sorted(m for m in sys.modules if m.endswith('_pb2') or 'metric_exporter' in m\n"
        "             or 'otlp.proto.grpc' in m or 'otlp.proto.http' in m))\n"
    )
    out = fresh_python(code)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_request_too_large_for_the_collector_goes_in_parts(protocol: str) -> None:
    """A collector that refuses a request for its size (gRPC RESOURCE_EXHAUSTED, HTTP
    413) gets the metrics in parts; a metric too large alone is dropped and the export
    counted failed. Wrong code caught: the whole export failing every time."""
    with OtlpReceiver(max_receive_message_length=24_000) as receiver:
        exporter = _exporter(target(receiver, protocol, "metrics"))
        provider = _provider(exporter)
        meter = provider.get_meter("otel_spans")
        for c in range(8):
            counter = meter.create_counter(f"c{c}")
            for i in range(150):
                counter.add(1, {"series": f"value-{i:04d}"})
        provider.force_flush()
        assert (exporter.counts.exported, exporter.counts.failed) == (1, 0)
        assert len({(p.name, p.attributes["series"]) for p in receiver.metrics()}) == 1200
        assert len(receiver.requests("metrics")) > 1
        receiver.clear()
        huge = meter.create_counter("huge")
        for i in range(1000):
            huge.add(1, {"series": f"value-{i:04d}"})
        provider.shutdown()
        assert (exporter.counts.exported, exporter.counts.failed) == (1, 1)
        assert {p.name for p in receiver.metrics()} == {f"c{c}" for c in range(8)}
