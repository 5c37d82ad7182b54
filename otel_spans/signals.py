"""The OTel side of the scheduler plugin: records in, signals out.

The plugin only ever hands records to :class:`Signals`; which signals exist, how they
are encoded and where they go is decided here and in :mod:`otel_spans.exporting`.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace.export import SpanExportResult

from otel_spans import traces
from otel_spans.config import Settings
from otel_spans.exporting import ExportPipeline, build_resource, make_span_exporter
from otel_spans.records import SpanRecord


class Signals:
    """Resource, exporters and pipelines of one process."""

    def __init__(self, settings: Settings, *, role: str, instance_id: str, scheduler_address: str):
        self.settings = settings
        self.resource = build_resource(
            settings, instance_id=instance_id, scheduler_address=scheduler_address
        )
        trace_settings = settings.traces
        self._span_exporter = make_span_exporter(trace_settings.target, role=role)

        def send_spans(batch: list[SpanRecord]) -> bool:
            spans = [
                traces.dask_span(
                    record,
                    self.resource,
                    max_length=settings.max_attribute_length,
                    code_max_length=trace_settings.code_max_length,
                )
                for record in batch
            ]
            return self._span_exporter.export(spans) == SpanExportResult.SUCCESS

        self.spans: ExportPipeline[SpanRecord] = ExportPipeline(
            "traces",
            send_spans,
            self._span_exporter.shutdown,
            queue_size=settings.queue_size,
            batch_size=settings.batch_size,
        )

    def describe(self) -> str:
        return f"traces to {self.settings.traces.target.describe()}"

    def submit_span(self, record: SpanRecord) -> bool:
        return self.spans.submit(record)

    def stats(self) -> dict[str, Any]:
        return {"traces": self.spans.stats().as_dict()}

    def close(self, timeout: float) -> None:
        """Flush and stop every pipeline within ``timeout`` seconds in all."""
        self.spans.close(timeout)
