"""The SDK's ``MetricsData`` written straight to an ``ExportMetricsServiceRequest``.

Why not the SDK's OTLP metric exporter: it builds one protobuf object per metric, data
point, attribute and exemplar on the metric reader's thread (CPU taken from the
scheduler's event loop through the GIL), and importing it brings the SDK's gRPC
exporter machinery into the scheduler process: thousands more objects that every full
garbage collection walks again. Written with :mod:`otel_spans.export.protobuf`'s
primitives, a request is a ``bytes.join`` per data point, and resource and scopes are
encoded once per exporter. The SDK's reader still collects and aggregates (views,
temporality, the task histogram's injected points); only the encoding is ours.

The output is what the SDK's ``encode_metrics`` builds, parsed alike
(``tests/unit/test_metrics_wire.py`` checks it on random data). Field numbers are those
of ``opentelemetry/proto/metrics/v1/metrics.proto`` and
``collector/metrics/v1/metrics_service.proto``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from itertools import groupby
from typing import Any

from opentelemetry.sdk.metrics.export import (
    ExponentialHistogram,
    Gauge,
    Histogram,
    MetricsData,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from otel_spans.export.protobuf import (
    key_values,
    length_delimited,
    message,
    pack_double,
    pack_fixed64,
    tag,
    utf8,
    varint,
)

#: Attributes are the SDK's, already bounded by it: nothing more is cut here.
_NO_LIMIT = 1 << 30
_U64 = (1 << 64) - 1

# Tags, by message (wire type 0 varint, 1 fixed64, 2 length-delimited).
_REQUEST_RESOURCE_METRICS = length_delimited(1)
_RM_RESOURCE, _RM_SCOPE_METRICS, _RM_SCHEMA_URL = (length_delimited(n) for n in (1, 2, 3))
_RESOURCE_ATTRIBUTE = length_delimited(1)
_SM_SCOPE, _SM_METRIC, _SM_SCHEMA_URL = (length_delimited(n) for n in (1, 2, 3))
_SCOPE_NAME, _SCOPE_VERSION, _SCOPE_ATTRIBUTE = (length_delimited(n) for n in (1, 2, 3))
_METRIC_NAME, _METRIC_DESCRIPTION, _METRIC_UNIT = (length_delimited(n) for n in (1, 2, 3))
_METRIC_GAUGE, _METRIC_SUM = length_delimited(5), length_delimited(7)
_METRIC_HISTOGRAM, _METRIC_EXP_HISTOGRAM = length_delimited(9), length_delimited(10)
# Gauge, Sum, Histogram and ExponentialHistogram number these alike.
_DATA_POINT, _TEMPORALITY, _MONOTONIC = length_delimited(1), tag(2, 0), tag(3, 0)
_NUM_START, _NUM_TIME = tag(2, 1), tag(3, 1)
_NUM_DOUBLE, _NUM_EXEMPLAR, _NUM_INT = tag(4, 1), length_delimited(5), tag(6, 1)
_NUM_ATTRIBUTE = length_delimited(7)
_HIST_START, _HIST_TIME, _HIST_COUNT, _HIST_SUM = tag(2, 1), tag(3, 1), tag(4, 1), tag(5, 1)
_HIST_BUCKETS, _HIST_BOUNDS = length_delimited(6), length_delimited(7)
_HIST_EXEMPLAR, _HIST_ATTRIBUTE = length_delimited(8), length_delimited(9)
_HIST_MIN, _HIST_MAX = tag(11, 1), tag(12, 1)
_EXP_ATTRIBUTE, _EXP_START, _EXP_TIME = length_delimited(1), tag(2, 1), tag(3, 1)
_EXP_COUNT, _EXP_SUM, _EXP_SCALE, _EXP_ZERO_COUNT = tag(4, 1), tag(5, 1), tag(6, 0), tag(7, 1)
_EXP_POSITIVE, _EXP_NEGATIVE, _EXP_FLAGS = length_delimited(8), length_delimited(9), tag(10, 0)
_EXP_EXEMPLAR, _EXP_MIN, _EXP_MAX = length_delimited(11), tag(12, 1), tag(13, 1)
_BUCKETS_OFFSET, _BUCKETS_COUNTS = tag(1, 0), length_delimited(2)
_EX_TIME, _EX_DOUBLE, _EX_INT = tag(2, 1), tag(3, 1), tag(6, 1)
_EX_SPAN_ID, _EX_TRACE_ID, _EX_ATTRIBUTE = (length_delimited(n) for n in (4, 5, 7))


def _attributes(field_tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
    return key_values(field_tag, attributes, _NO_LIMIT, _NO_LIMIT)[0] if attributes else b""


def _fixed(field_tag: bytes, value: int) -> bytes:
    """A fixed64 or sfixed64 field (two's complement, as protobuf writes it)."""
    return field_tag + pack_fixed64(value & _U64)


def _sint(value: int) -> bytes:
    """A ``sint32`` (zigzag) varint."""
    return varint((value << 1) ^ (value >> 63))


def _number(double_tag: bytes, int_tag: bytes, value: float | int) -> bytes:
    """The ``as_int`` / ``as_double`` of a value (``bool`` is an int, as the SDK has it)."""
    if isinstance(value, int):
        return _fixed(int_tag, value)
    return double_tag + pack_double(value)


def _exemplars(field_tag: bytes, exemplars: Any) -> bytes:
    parts = []
    for exemplar in exemplars:
        out = _attributes(_EX_ATTRIBUTE, exemplar.filtered_attributes)
        out += _fixed(_EX_TIME, exemplar.time_unix_nano)
        if not isinstance(exemplar.value, int | float):
            raise ValueError("an exemplar's value must be an int or a float")
        out += _number(_EX_DOUBLE, _EX_INT, exemplar.value)
        if exemplar.span_id is not None and exemplar.trace_id is not None:
            out += message(_EX_SPAN_ID, exemplar.span_id.to_bytes(8, "big"))
            out += message(_EX_TRACE_ID, exemplar.trace_id.to_bytes(16, "big"))
        parts.append(message(field_tag, out))
    return b"".join(parts)


def _optional(field_tag: bytes, value: float | None) -> bytes:
    return b"" if value is None else field_tag + pack_double(value)


def _number_point(point: Any, *, start: bool) -> bytes:
    """A ``NumberDataPoint``: a gauge's has no start time (as the SDK writes it)."""
    out = _attributes(_NUM_ATTRIBUTE, point.attributes)
    if start:
        out += _fixed(_NUM_START, point.start_time_unix_nano)
    out += _fixed(_NUM_TIME, point.time_unix_nano)
    out += _number(_NUM_DOUBLE, _NUM_INT, point.value)
    return out + _exemplars(_NUM_EXEMPLAR, point.exemplars)


def _histogram_point(point: Any) -> bytes:
    counts, bounds = point.bucket_counts, point.explicit_bounds
    parts = [
        _attributes(_HIST_ATTRIBUTE, point.attributes),
        _fixed(_HIST_START, point.start_time_unix_nano),
        _fixed(_HIST_TIME, point.time_unix_nano),
        _fixed(_HIST_COUNT, point.count),
        _HIST_SUM + pack_double(point.sum),
        # packed repeated fixed64 and double: 8 bytes each, little-endian
        message(_HIST_BUCKETS, struct.pack(f"<{len(counts)}Q", *counts)),
        message(_HIST_BOUNDS, struct.pack(f"<{len(bounds)}d", *bounds)),
        _exemplars(_HIST_EXEMPLAR, point.exemplars),
        _optional(_HIST_MIN, point.min),
        _optional(_HIST_MAX, point.max),
    ]
    return b"".join(parts)


def _buckets(field_tag: bytes, buckets: Any) -> bytes:
    """One side's ``Buckets``, left out when it has none (as the SDK does)."""
    if not buckets.bucket_counts:
        return b""
    counts = b"".join(varint(n) for n in buckets.bucket_counts)  # packed uint64
    return message(
        field_tag, _BUCKETS_OFFSET + _sint(buckets.offset) + message(_BUCKETS_COUNTS, counts)
    )


def _exponential_point(point: Any) -> bytes:
    parts = [
        _attributes(_EXP_ATTRIBUTE, point.attributes),
        _fixed(_EXP_START, point.start_time_unix_nano),
        _fixed(_EXP_TIME, point.time_unix_nano),
        _fixed(_EXP_COUNT, point.count),
        _EXP_SUM + pack_double(point.sum),
        _EXP_SCALE + _sint(point.scale),
        _fixed(_EXP_ZERO_COUNT, point.zero_count),
        _buckets(_EXP_POSITIVE, point.positive),
        _buckets(_EXP_NEGATIVE, point.negative),
        _EXP_FLAGS + varint(point.flags) if point.flags else b"",
        _exemplars(_EXP_EXEMPLAR, point.exemplars),
        _optional(_EXP_MIN, point.min),
        _optional(_EXP_MAX, point.max),
    ]
    return b"".join(parts)


def _data(data: Any) -> bytes:
    """The ``Metric.data`` field; nothing for a metric without points (as the SDK)."""
    points = data.data_points
    if not points:
        return b""
    if isinstance(data, Sum):
        body = b"".join(message(_DATA_POINT, _number_point(p, start=True)) for p in points)
        body += _TEMPORALITY + varint(data.aggregation_temporality)
        return message(_METRIC_SUM, body + _MONOTONIC + varint(int(data.is_monotonic)))
    if isinstance(data, Gauge):
        body = b"".join(message(_DATA_POINT, _number_point(p, start=False)) for p in points)
        return message(_METRIC_GAUGE, body)
    if isinstance(data, Histogram):
        body = b"".join(message(_DATA_POINT, _histogram_point(p)) for p in points)
        body += _TEMPORALITY + varint(data.aggregation_temporality)
        return message(_METRIC_HISTOGRAM, body)
    if isinstance(data, ExponentialHistogram):
        body = b"".join(message(_DATA_POINT, _exponential_point(p)) for p in points)
        body += _TEMPORALITY + varint(data.aggregation_temporality)
        return message(_METRIC_EXP_HISTOGRAM, body)
    raise TypeError(f"unsupported metric data {type(data).__name__}")


def _string(field_tag: bytes, value: str | None) -> bytes:
    return message(field_tag, utf8(value, _NO_LIMIT)) if value else b""


def _metric(metric: Any) -> bytes:
    return (
        _string(_METRIC_NAME, metric.name)
        + _string(_METRIC_DESCRIPTION, metric.description)
        + _string(_METRIC_UNIT, metric.unit)
        + _data(metric.data)
    )


def _scope(scope: InstrumentationScope | None) -> bytes:
    """A ``ScopeMetrics``' scope (its schema URL is written after its metrics)."""
    if scope is None:
        return message(_SM_SCOPE, b"")
    body = _string(_SCOPE_NAME, scope.name) + _string(_SCOPE_VERSION, scope.version)
    return message(_SM_SCOPE, body + _attributes(_SCOPE_ATTRIBUTE, scope.attributes))


def _resource(resource: Resource) -> bytes:
    return message(_RM_RESOURCE, _attributes(_RESOURCE_ATTRIBUTE, resource.attributes))


#: One metric ready to go, for a request too large to send whole: its resource's and
#: scope's encodings with their schema URLs, and its own ``Metric`` field.
MetricPiece = tuple[bytes, bytes, bytes, bytes, bytes]


def request_of(pieces: Sequence[MetricPiece]) -> bytes:
    """One request of ``pieces``: consecutive ones of one resource and scope together."""
    parts = []
    for (resource, resource_schema), of_resource in groupby(pieces, lambda p: (p[0], p[1])):
        body = resource
        for (scope, scope_schema), of_scope in groupby(of_resource, lambda p: (p[2], p[3])):
            metrics = b"".join(p[4] for p in of_scope)
            body += message(_RM_SCOPE_METRICS, scope + metrics + scope_schema)
        parts.append(message(_REQUEST_RESOURCE_METRICS, body + resource_schema))
    return b"".join(parts)


class MetricsEncoder:
    """``MetricsData`` → ``ExportMetricsServiceRequest`` bytes, on the reader's thread.

    The reader hands the same resource and scope objects to every export: their
    encodings are kept (by identity; at most a few scopes per process).
    """

    def __init__(self) -> None:
        self._encoded: dict[int, tuple[object, bytes]] = {}

    def _once(self, item: Any, encode: Any) -> bytes:
        kept = self._encoded.get(id(item))
        if kept is not None and kept[0] is item:
            return kept[1]
        if len(self._encoded) > 64:
            self._encoded.clear()
        encoded: bytes = encode(item)
        self._encoded[id(item)] = (item, encoded)
        return encoded

    def request(self, data: MetricsData) -> bytes:
        parts = []
        for resource_metrics in data.resource_metrics:
            resource = resource_metrics.resource
            body = self._once(resource, _resource)
            for scope_metrics in resource_metrics.scope_metrics:
                scope = scope_metrics.scope
                scoped = self._once(scope, _scope) + b"".join(
                    message(_SM_METRIC, _metric(m)) for m in scope_metrics.metrics
                )
                if scope is not None:
                    scoped += _string(_SM_SCHEMA_URL, scope.schema_url)
                body += message(_RM_SCOPE_METRICS, scoped)
            # The SDK's encoder writes the resource's schema URL here.
            body += _string(_RM_SCHEMA_URL, resource.schema_url)
            parts.append(message(_REQUEST_RESOURCE_METRICS, body))
        return b"".join(parts)

    def pieces(self, data: MetricsData) -> list[MetricPiece]:
        """``data`` metric by metric, for :func:`request_of` to send in parts."""
        out = []
        for resource_metrics in data.resource_metrics:
            resource = resource_metrics.resource
            encoded = self._once(resource, _resource)
            resource_schema = _string(_RM_SCHEMA_URL, resource.schema_url)
            for scope_metrics in resource_metrics.scope_metrics:
                scope = scope_metrics.scope
                head = self._once(scope, _scope)
                schema = _string(_SM_SCHEMA_URL, scope.schema_url) if scope is not None else b""
                for metric in scope_metrics.metrics:
                    piece = message(_SM_METRIC, _metric(metric))
                    out.append((encoded, resource_schema, head, schema, piece))
        return out
