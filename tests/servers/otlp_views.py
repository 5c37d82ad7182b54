"""Decoding of OTLP export requests into flat, easily asserted records.

Why a separate module: the nested Resource -> Scope -> item layout of OTLP is
right for the wire and awkward in assertions.  Tests want "the span named X
has parent Y and attribute Z == 3", so every received item is flattened into
a small frozen dataclass carrying its resource and scope, with ids rendered
as lowercase hex (as in W3C ``traceparent``) and ``AnyValue`` turned into
plain Python values.  These are pure functions of the decoded protobufs;
:mod:`tests.servers.otlp_receiver` only does transport and bookkeeping.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2

__all__ = [
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
    "Attributes",
    "HeaderValue",
    "ReceivedLog",
    "ReceivedMetricPoint",
    "ReceivedRequest",
    "ReceivedSpan",
    "Signal",
    "SpanEvent",
    "SpanLink",
    "Transport",
    "decode_any_value",
    "decode_attributes",
    "flatten_logs",
    "flatten_metrics",
    "flatten_spans",
    "parse_otlp_json",
]

Signal = Literal["traces", "metrics", "logs"]
Transport = Literal["grpc", "http"]

# Attribute values decoded from OTLP ``AnyValue``: str, int, float, bool,
# bytes, list (array) or dict (kvlist) -- or None for an empty AnyValue.
Attributes = dict[str, Any]
HeaderValue = str | bytes

#: The Export request message of each signal, shared by both transports.
REQUEST_TYPES: dict[Signal, type[Message]] = {
    "traces": trace_service_pb2.ExportTraceServiceRequest,
    "metrics": metrics_service_pb2.ExportMetricsServiceRequest,
    "logs": logs_service_pb2.ExportLogsServiceRequest,
}
#: The (empty on success) Export response message of each signal.
RESPONSE_TYPES: dict[Signal, type[Message]] = {
    "traces": trace_service_pb2.ExportTraceServiceResponse,
    "metrics": metrics_service_pb2.ExportMetricsServiceResponse,
    "logs": logs_service_pb2.ExportLogsServiceResponse,
}


# --------------------------------------------------------------------------
# Flattened views
# --------------------------------------------------------------------------


class SpanEvent(NamedTuple):
    """A span event; a tuple ``(name, time_ns, attributes)`` with names."""

    name: str
    time_ns: int
    attributes: Attributes


class SpanLink(NamedTuple):
    """A span link; a tuple ``(trace_id, span_id, attributes)`` with names.

    Ids are lowercase hex strings, as in W3C ``traceparent``.
    """

    trace_id: str
    span_id: str
    attributes: Attributes
    #: W3C trace flags (bits 0-7) and the is-remote bits (8, 9) of the linked context.
    flags: int = 0


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as received, flattened out of Resource/Scope nesting.

    Ids are lowercase hex (``""`` when absent, e.g. a root span's parent).
    ``kind`` and ``status_code`` are the *OTLP proto* enum numbers
    (``Span.SPAN_KIND_INTERNAL == 1``, ``Status.STATUS_CODE_ERROR == 2``),
    which differ from the Python SDK's ``SpanKind`` values (INTERNAL == 0).
    """

    resource: Attributes
    scope_name: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: Attributes
    events: list[SpanEvent]
    links: list[SpanLink]
    status_code: int
    status_message: str
    transport: Transport
    scope_version: str = ""
    trace_state: str = ""
    flags: int = 0


@dataclass(frozen=True)
class ReceivedMetricPoint:
    """One metric data point, flattened out of Resource/Scope/Metric nesting.

    ``kind`` is one of ``"sum"``, ``"gauge"``, ``"histogram"``,
    ``"exp_histogram"``, ``"summary"``.  ``value`` is an int/float for sums
    and gauges; a dict for the others (histogram: ``count``, ``sum``,
    ``bucket_counts``, ``explicit_bounds``, ``min``, ``max``).
    ``temporality`` is the OTLP enum (1 = DELTA, 2 = CUMULATIVE, 0 for
    gauges/summaries).  Exemplars are dicts with hex ``trace_id``/``span_id``,
    ``value``, ``time_ns`` and ``filtered_attributes``.
    """

    resource: Attributes
    scope_name: str
    name: str
    unit: str
    description: str
    kind: str
    is_monotonic: bool
    temporality: int
    attributes: Attributes
    value: Any
    start_ns: int
    time_ns: int
    exemplars: list[dict[str, Any]]
    transport: Transport
    scope_version: str = ""


@dataclass(frozen=True)
class ReceivedLog:
    """One log record, flattened out of Resource/Scope nesting.

    ``body`` is the decoded ``AnyValue`` (usually a str).  Ids are lowercase
    hex, ``""`` when the record was emitted outside a span.
    """

    resource: Attributes
    scope_name: str
    time_ns: int
    observed_time_ns: int
    severity_number: int
    severity_text: str
    body: Any
    attributes: Attributes
    trace_id: str
    span_id: str
    event_name: str
    transport: Transport
    flags: int = 0
    scope_version: str = ""


@dataclass(frozen=True)
class ReceivedRequest:
    """One successfully accepted Export call, exactly as decoded.

    ``headers`` holds gRPC invocation metadata or HTTP request headers, keys
    lower-cased (binary ``-bin`` gRPC metadata values stay ``bytes``).
    """

    signal: Signal
    transport: Transport
    request: Any
    headers: dict[str, HeaderValue]
    received_ns: int = field(default_factory=time.time_ns)


# --------------------------------------------------------------------------
# Decoding helpers
# --------------------------------------------------------------------------


def decode_any_value(value: common_pb2.AnyValue) -> Any:
    """Convert an OTLP ``AnyValue`` to the natural Python value."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [decode_any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return decode_attributes(value.kvlist_value.values)
    return getattr(value, kind)


def decode_attributes(kvs: Iterable[common_pb2.KeyValue]) -> Attributes:
    """Convert a repeated ``KeyValue`` into a plain dict."""
    return {kv.key: decode_any_value(kv.value) for kv in kvs}


def _exemplars(points_exemplars: Iterable[metrics_pb2.Exemplar]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for ex in points_exemplars:
        which = ex.WhichOneof("value")
        out.append(
            {
                "trace_id": ex.trace_id.hex(),
                "span_id": ex.span_id.hex(),
                "value": getattr(ex, which) if which else None,
                "time_ns": ex.time_unix_nano,
                "filtered_attributes": decode_attributes(ex.filtered_attributes),
            }
        )
    return out


def _optional(msg: Message, name: str) -> Any:
    """Return proto3 ``optional`` field *name*, or None if unset."""
    return getattr(msg, name) if msg.HasField(name) else None


def flatten_spans(rec: ReceivedRequest) -> list[ReceivedSpan]:
    out: list[ReceivedSpan] = []
    for rs in rec.request.resource_spans:
        resource = decode_attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for sp in ss.spans:
                out.append(
                    ReceivedSpan(
                        resource=resource,
                        scope_name=ss.scope.name,
                        scope_version=ss.scope.version,
                        name=sp.name,
                        trace_id=sp.trace_id.hex(),
                        span_id=sp.span_id.hex(),
                        parent_span_id=sp.parent_span_id.hex(),
                        kind=sp.kind,
                        start_ns=sp.start_time_unix_nano,
                        end_ns=sp.end_time_unix_nano,
                        attributes=decode_attributes(sp.attributes),
                        events=[
                            SpanEvent(e.name, e.time_unix_nano, decode_attributes(e.attributes))
                            for e in sp.events
                        ],
                        links=[
                            SpanLink(
                                lk.trace_id.hex(),
                                lk.span_id.hex(),
                                decode_attributes(lk.attributes),
                                lk.flags,
                            )
                            for lk in sp.links
                        ],
                        status_code=sp.status.code,
                        status_message=sp.status.message,
                        trace_state=sp.trace_state,
                        flags=sp.flags,
                        transport=rec.transport,
                    )
                )
    return out


def _metric_points(metric: metrics_pb2.Metric) -> list[tuple[str, bool, int, Any, Any]]:
    """Return ``(kind, is_monotonic, temporality, point, value)`` per point."""
    data = metric.WhichOneof("data")
    rows: list[tuple[str, bool, int, Any, Any]] = []
    if data == "sum":
        for p in metric.sum.data_points:
            which = p.WhichOneof("value")
            rows.append(
                (
                    "sum",
                    metric.sum.is_monotonic,
                    metric.sum.aggregation_temporality,
                    p,
                    getattr(p, which) if which else None,
                )
            )
    elif data == "gauge":
        for p in metric.gauge.data_points:
            which = p.WhichOneof("value")
            rows.append(("gauge", False, 0, p, getattr(p, which) if which else None))
    elif data == "histogram":
        for hp in metric.histogram.data_points:
            value = {
                "count": hp.count,
                "sum": _optional(hp, "sum"),
                "bucket_counts": list(hp.bucket_counts),
                "explicit_bounds": list(hp.explicit_bounds),
                "min": _optional(hp, "min"),
                "max": _optional(hp, "max"),
            }
            rows.append(("histogram", False, metric.histogram.aggregation_temporality, hp, value))
    elif data == "exponential_histogram":
        for ep in metric.exponential_histogram.data_points:
            value = {
                "count": ep.count,
                "sum": _optional(ep, "sum"),
                "scale": ep.scale,
                "zero_count": ep.zero_count,
                "zero_threshold": ep.zero_threshold,
                "positive": {
                    "offset": ep.positive.offset,
                    "bucket_counts": list(ep.positive.bucket_counts),
                },
                "negative": {
                    "offset": ep.negative.offset,
                    "bucket_counts": list(ep.negative.bucket_counts),
                },
                "min": _optional(ep, "min"),
                "max": _optional(ep, "max"),
            }
            rows.append(
                (
                    "exp_histogram",
                    False,
                    metric.exponential_histogram.aggregation_temporality,
                    ep,
                    value,
                )
            )
    elif data == "summary":
        for sp in metric.summary.data_points:
            value = {
                "count": sp.count,
                "sum": sp.sum,
                "quantile_values": [(q.quantile, q.value) for q in sp.quantile_values],
            }
            rows.append(("summary", False, 0, sp, value))
    return rows


def flatten_metrics(rec: ReceivedRequest) -> list[ReceivedMetricPoint]:
    out: list[ReceivedMetricPoint] = []
    for rm in rec.request.resource_metrics:
        resource = decode_attributes(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for kind, monotonic, temporality, point, value in _metric_points(metric):
                    exemplars = _exemplars(point.exemplars) if kind != "summary" else []
                    out.append(
                        ReceivedMetricPoint(
                            resource=resource,
                            scope_name=sm.scope.name,
                            scope_version=sm.scope.version,
                            name=metric.name,
                            unit=metric.unit,
                            description=metric.description,
                            kind=kind,
                            is_monotonic=monotonic,
                            temporality=temporality,
                            attributes=decode_attributes(point.attributes),
                            value=value,
                            start_ns=point.start_time_unix_nano,
                            time_ns=point.time_unix_nano,
                            exemplars=exemplars,
                            transport=rec.transport,
                        )
                    )
    return out


def flatten_logs(rec: ReceivedRequest) -> list[ReceivedLog]:
    out: list[ReceivedLog] = []
    for rl in rec.request.resource_logs:
        resource = decode_attributes(rl.resource.attributes)
        for sl in rl.scope_logs:
            for lr in sl.log_records:
                out.append(
                    ReceivedLog(
                        resource=resource,
                        scope_name=sl.scope.name,
                        scope_version=sl.scope.version,
                        time_ns=lr.time_unix_nano,
                        observed_time_ns=lr.observed_time_unix_nano,
                        severity_number=lr.severity_number,
                        severity_text=lr.severity_text,
                        body=decode_any_value(lr.body),
                        attributes=decode_attributes(lr.attributes),
                        trace_id=lr.trace_id.hex(),
                        span_id=lr.span_id.hex(),
                        event_name=lr.event_name,
                        flags=lr.flags,
                        transport=rec.transport,
                    )
                )
    return out


_JSON_ID_KEYS = frozenset(
    {"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"}
)


def _hex_ids_to_base64(node: Any) -> Any:
    """OTLP/JSON encodes ids as hex, protobuf JSON mapping expects base64."""
    if isinstance(node, dict):
        return {
            k: (
                base64.b64encode(bytes.fromhex(v)).decode()
                if k in _JSON_ID_KEYS and isinstance(v, str)
                else _hex_ids_to_base64(v)
            )
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids_to_base64(v) for v in node]
    return node


def parse_otlp_json(body: bytes, cls: type[Message]) -> Message:
    data = _hex_ids_to_base64(json.loads(body))
    msg = cls()
    json_format.ParseDict(data, msg, ignore_unknown_fields=True)
    return msg
