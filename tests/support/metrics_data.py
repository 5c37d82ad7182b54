"""A batch of metrics as the OTel SDK's reader collects it, for the code that adds
otel-spans' own histograms to one (``Histograms.inject``)."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricsData


def sdk_batch(meter: str) -> MetricsData:
    """One counter of the meter named ``meter``, collected by the SDK: a batch of the
    real shape, with a scope of ``meter``."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    provider.get_meter(meter).create_counter("c").add(1)
    data = reader.get_metrics_data()
    provider.shutdown()
    assert data is not None
    return data
