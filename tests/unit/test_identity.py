"""Who made the bytes: the resource's distro and namespace, the scope's version and
schema URL, the user agent, and the trace link's own key."""

from __future__ import annotations

import platform

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import otel_spans
from otel_spans import semconv
from otel_spans.config import Settings
from otel_spans.export import wire
from otel_spans.export.otlp_retry import user_agent
from otel_spans.export.resource import build_resource
from otel_spans.records import LogEntry
from otel_spans.settings import RecordLimits
from otel_spans.telemetry.histogram import Histograms
from otel_spans.telemetry.logs import LogEncoder
from otel_spans.telemetry.metrics import HISTOGRAMS, TASK_DURATION
from tests.support.metrics_data import sdk_batch


@pytest.fixture(autouse=True)
def no_resource_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_RESOURCE_ATTRIBUTES", "OTEL_SERVICE_NAME"):
        monkeypatch.delenv(name, raising=False)


def resource_of(**overrides: object) -> dict[str, object]:
    settings = Settings.from_config(overrides, environ={})
    resource = build_resource(settings, instance_id="Scheduler-1", scheduler_address="tcp://s:1")
    return dict(resource.attributes)


def test_the_resource_names_the_distribution_that_made_the_bytes() -> None:
    attributes = resource_of()
    assert attributes["telemetry.distro.name"] == "otel-spans"
    assert attributes["telemetry.distro.version"] == otel_spans.__version__
    assert attributes["telemetry.sdk.name"] == "opentelemetry"  # the SDK's, still there


def test_service_namespace_is_a_setting() -> None:
    assert resource_of(**{"service-namespace": "risk"})["service.namespace"] == "risk"
    assert "service.namespace" not in resource_of()


def test_service_namespace_from_the_resource_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.namespace=analytics")
    assert resource_of()["service.namespace"] == "analytics"
    # the setting wins, as otel-spans' settings do over the variables
    assert resource_of(**{"service-namespace": "risk"})["service.namespace"] == "risk"


def test_the_user_agent_names_the_package_and_the_language() -> None:
    expected = f"otel-spans/{otel_spans.__version__} (python/{platform.python_version()})"
    assert user_agent() == expected


def test_spans_carry_the_scope_version_and_schema_url() -> None:
    encoder = wire.RequestEncoder(
        {}, semconv.SCOPE_NAME, otel_spans.__version__, semconv.SCHEMA_URL
    )
    span = wire.span(
        name="s",
        trace_id=1,
        span_id=2,
        parent_span_id=0,
        start_ns=1,
        end_ns=2,
        attributes={},
        limits=RecordLimits(),
    )
    scope_spans = (
        ExportTraceServiceRequest.FromString(encoder.request([span]))
        .resource_spans[0]
        .scope_spans[0]
    )
    assert (scope_spans.scope.name, scope_spans.scope.version) == (
        "otel_spans",
        otel_spans.__version__,
    )
    assert scope_spans.schema_url == semconv.SCHEMA_URL
    assert len(scope_spans.spans) == 1


def test_logs_carry_the_scope_version_and_schema_url() -> None:
    encoder = LogEncoder({}, semconv.SCOPE_NAME, RecordLimits())
    entry = LogEntry(
        time_ns=1,
        severity_number=9,
        severity_text="INFO",
        body="started",
        attributes=(),
        event_name="dask.span.started",
    )
    request = ExportLogsServiceRequest.FromString(encoder.request([entry]))
    (scope_logs,) = request.resource_logs[0].scope_logs
    assert scope_logs.scope.version == otel_spans.__version__
    assert scope_logs.schema_url == semconv.SCHEMA_URL


def test_the_histograms_join_a_scope_with_version_and_schema_url() -> None:
    data = sdk_batch("another library")
    histograms = Histograms(HISTOGRAMS)
    histograms[TASK_DURATION.name].record((("dask.task.prefix", "inc"),), 0.5)
    histograms[semconv.M_SPAN_DURATION].record((("dask.span.name", "wf"),), 3.0)
    scopes = [sm for rm in histograms.inject(data).resource_metrics for sm in rm.scope_metrics]
    (ours,) = [sm for sm in scopes if sm.scope.name == semconv.SCOPE_NAME]
    assert ours.scope.version == otel_spans.__version__
    assert ours.schema_url == semconv.SCHEMA_URL
    assert {m.name for m in ours.metrics} == {TASK_DURATION.name, semconv.M_SPAN_DURATION}


def test_the_trace_link_has_a_key_of_its_own() -> None:
    assert semconv.OTEL_SPANS_TRACE_URL == "otel_spans.trace_url"
    assert "url.full" not in vars(semconv).values()
