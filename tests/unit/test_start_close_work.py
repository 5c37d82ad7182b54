"""What a cluster's start and close cost otel-spans, kept to what is needed.

Settings are resolved once for the same inputs (the scheduler and each worker of a
process resolve them alike), the worker's span processor starts with its first span,
and a pipeline whose thread finished stops its exporter without a thread of its own.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import dask.config
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.util._once import Once

from otel_spans import config
from otel_spans.config import Settings
from otel_spans.export.pipeline import ExportPipeline
from otel_spans.worker import tracing
from tests.servers.ports import wait_until

pytestmark = pytest.mark.usefixtures("clean_config")


def test_same_inputs_resolve_once() -> None:
    first = Settings.from_config({"queue-size": 100}, environ={})
    assert Settings.from_config({"queue-size": 100}, environ={}) is first
    with dask.config.set({"otel-spans.batch-size": 7}):
        other = Settings.from_config({"queue-size": 100}, environ={})
    assert other is not first and other.batch_size == 7
    # Changed overrides, variables: resolved again.
    assert Settings.from_config({"queue-size": 101}, environ={}).queue_size == 101
    env = {"OTEL_SERVICE_NAME": "svc"}
    assert Settings.from_config(environ=env).service_name == "svc"
    assert Settings.from_config(environ={}).service_name is None


def test_values_equal_in_python_but_not_to_the_parsers_are_told_apart() -> None:
    with dask.config.set({"otel-spans.traces.caller-link": True}):
        assert Settings.from_config(environ={}).traces.caller_link is True
    with (
        dask.config.set({"otel-spans.traces.caller-link": 1}),
        pytest.raises(config.ConfigError, match="caller-link"),
    ):
        Settings.from_config(environ={})


def test_a_resolution_that_warned_warns_again(caplog: pytest.LogCaptureFixture) -> None:
    env = {"OTEL_METRIC_EXPORT_INTERVAL": "soon"}
    for _ in range(2):
        config._WARNED.clear()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="otel_spans.config"):
            Settings.from_config(environ=env)
        assert "OTEL_METRIC_EXPORT_INTERVAL" in caplog.text


def test_a_certificate_is_checked_at_each_resolution(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    overrides = {"endpoint": "https://collector:4317", "certificate": str(ca)}
    assert Settings.from_config(overrides, environ={}).traces.target.certificate == str(ca)
    ca.unlink()
    with pytest.raises(config.ConfigError, match="certificate"):
        Settings.from_config(overrides, environ={})


def exporter_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("Otel", "otel-spans"))]


def test_the_worker_span_processor_starts_with_the_first_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(tracing, "_process", tracing._Process())
    # Nothing listens on port 1: the span's export is refused and retried until its
    # timeout, on the shutdown thread the release abandons after 0.2 s (1 s, not the
    # default 10: the thread would outlive this test into the next one's checks).
    overrides = {"endpoint": "http://127.0.0.1:1", "shutdown-timeout": "0.2s", "timeout": "1s"}
    settings = Settings.from_config(overrides, environ={})
    before = exporter_threads()
    lease = tracing.acquire(settings, lambda: TracerProvider().resource)
    export = tracing._process.processor.export
    assert export is not None and export.processor is None
    assert exporter_threads() == before  # a worker without spans costs no thread
    lease.release()
    assert exporter_threads() == before

    lease = tracing.acquire(settings, lambda: TracerProvider().resource)
    export = tracing._process.processor.export
    assert export is not None
    provider: Any = trace.get_tracer_provider()
    with provider.get_tracer("t").start_as_current_span("s"):
        pass
    assert export.processor is not None  # started by the span, which is queued
    assert export.stats()["queued"] + export.stats()["exported"] + export.stats()["failed"] == 1
    lease.release()
    assert export.closed and export.stats()["dropped"] == 0
    # the abandoned export runs out its timeout, and its thread ends
    wait_until(lambda: exporter_threads() == before, 10, message=lambda: str(exporter_threads()))


def test_a_finished_pipeline_stops_its_exporter_inline() -> None:
    stopped_on: list[str] = []
    pipeline: ExportPipeline[int] = ExportPipeline(
        "logs",
        lambda batch: True,
        lambda: stopped_on.append(threading.current_thread().name),
        queue_size=10,
        batch_size=10,
        batch_wait=1.0,
    )
    pipeline.submit(1)
    pipeline.flush(5.0)
    assert stopped_on == []  # the transport stays open until stop()
    stats = pipeline.stop()
    assert stats.exported == 1 and stats.lost == 0
    assert stopped_on == [threading.current_thread().name]  # no shutdown thread
