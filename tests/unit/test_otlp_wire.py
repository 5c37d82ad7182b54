"""The hand-written OTLP trace encoder against the SDK's own encoder, the reference."""

from __future__ import annotations

import enum
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as SdkEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link as SdkLink
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from otel_spans.config import RecordLimits
from otel_spans.export import log_wire
from otel_spans.export import wire as otlp_wire
from otel_spans.export.wire import WireEvent, WireLink

UNLIMITED = RecordLimits(*(10**6,) * 8)
RESOURCE = {"service.name": "dask", "service.instance.id": "é-1", "dask.workers": 3}

int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
scalars = st.one_of(
    st.text(), st.booleans(), int64, st.floats(allow_nan=False, allow_infinity=True)
)
values = st.one_of(
    scalars,
    st.lists(st.text(), max_size=4).map(tuple),
    st.lists(st.text(), max_size=4),
    # items past one length byte, as a tuple's items are encoded apart from scalars
    st.lists(st.text(min_size=40, max_size=140), max_size=2).map(tuple),
    st.lists(int64, max_size=4).map(tuple),
    st.lists(st.booleans(), max_size=4).map(tuple),
)
# keys past one length byte too, each kind of value then taking the general path
keys = st.one_of(st.text(min_size=1, max_size=20), st.text(min_size=100, max_size=140))
attribute_maps = st.dictionaries(keys, values, max_size=8)
ids64 = st.integers(min_value=1, max_value=2**64 - 1)
ids128 = st.integers(min_value=1, max_value=2**128 - 1)
times = st.integers(min_value=0, max_value=2**63 - 1)


def context(trace_id: int, span_id: int) -> SpanContext:
    return SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(1))


def decode(spans: list[bytes]) -> ExportTraceServiceRequest:
    encoder = otlp_wire.RequestEncoder(RESOURCE, "otel_spans")
    return ExportTraceServiceRequest.FromString(encoder.request(spans))


def reference(spans: list[ReadableSpan]) -> ExportTraceServiceRequest:
    """The SDK's request, plus the W3C sampled bit in ``Span.flags`` and ``Link.flags``
    (bits 0-7 carry the W3C trace flags; the SDK leaves them 0, we say "sampled")."""
    request = encode_spans(spans)
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                span.flags |= 0x01
                for link in span.links:
                    link.flags |= 0x01
    return request


def sdk_span(**fields: Any) -> ReadableSpan:
    trace_id = fields["trace_id"]
    parent = fields["parent_span_id"]
    status = (
        Status(StatusCode.ERROR, fields["status_message"])
        if fields["status_code"] == otlp_wire.STATUS_ERROR
        else Status(StatusCode.UNSET)
    )
    return ReadableSpan(
        name=fields["name"],
        context=context(trace_id, fields["span_id"]),
        parent=context(trace_id, parent) if parent else None,
        resource=Resource(RESOURCE),
        attributes=fields["attributes"],
        events=[SdkEvent(e.name, e.attributes, e.time_ns) for e in fields["events"]],
        links=[SdkLink(context(x.trace_id, x.span_id), x.attributes) for x in fields["links"]],
        kind=SpanKind.INTERNAL,
        status=status,
        start_time=fields["start_ns"],
        end_time=fields["end_ns"],
        instrumentation_scope=InstrumentationScope("otel_spans"),
    )


@st.composite
def span_fields(draw: st.DrawFn) -> dict[str, Any]:
    start = draw(times)
    erred = draw(st.booleans())
    return {
        "name": draw(st.text(min_size=1)),
        "trace_id": draw(ids128),
        "span_id": draw(ids64),
        "parent_span_id": draw(st.one_of(st.just(0), ids64)),
        "start_ns": start,
        "end_ns": draw(st.integers(min_value=start, max_value=2**63 - 1)),
        "attributes": draw(attribute_maps),
        "events": draw(
            st.lists(st.builds(WireEvent, st.text(min_size=1), times, attribute_maps), max_size=3)
        ),
        # The defaults (a sampled local span) given: builds() draws a named tuple's too.
        "links": draw(
            st.lists(
                st.builds(WireLink, ids128, ids64, attribute_maps, st.just(1), st.just(False)),
                max_size=3,
            )
        ),
        "status_code": otlp_wire.STATUS_ERROR if erred else otlp_wire.STATUS_UNSET,
        "status_message": draw(st.text()) if erred else "",
    }


@settings(max_examples=300, deadline=None)
@given(st.lists(span_fields(), min_size=1, max_size=3))
def test_same_request_as_the_sdk_encoder(spans: list[dict[str, Any]]) -> None:
    ours = decode([otlp_wire.span(limits=UNLIMITED, **fields) for fields in spans])
    assert ours == reference([sdk_span(**fields) for fields in spans])


def one_span(**overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "name": "s",
        "trace_id": 1,
        "span_id": 2,
        "parent_span_id": 0,
        "start_ns": 10,
        "end_ns": 20,
        "attributes": {},
        "limits": UNLIMITED,
    }
    fields.update(overrides)
    return decode([otlp_wire.span(**fields)]).resource_spans[0].scope_spans[0].spans[0]


def test_count_limits_keep_the_first_items_and_count_the_rest() -> None:
    limits = RecordLimits(
        attribute_length=100,
        attribute_count=3,
        events=2,
        links=1,
        event_attribute_count=2,
        link_attribute_count=4,
    )
    attributes = {f"a{i}": i for i in range(10)}
    span = one_span(
        attributes=attributes,
        events=[WireEvent(f"e{i}", i, attributes) for i in range(5)],
        links=[WireLink(1, 3, attributes), WireLink(1, 4, {})],
        limits=limits,
    )
    assert [kv.key for kv in span.attributes] == ["a0", "a1", "a2"]
    assert span.dropped_attributes_count == 7
    assert [e.name for e in span.events] == ["e0", "e1"]
    assert span.dropped_events_count == 3
    # events and links have limits of their own (OTEL_EVENT/LINK_ATTRIBUTE_COUNT_LIMIT)
    assert [len(e.attributes) for e in span.events] == [2, 2]
    assert [e.dropped_attributes_count for e in span.events] == [8, 8]
    assert len(span.links) == 1 and span.dropped_links_count == 1
    assert [kv.key for kv in span.links[0].attributes] == ["a0", "a1", "a2", "a3"]
    assert span.links[0].dropped_attributes_count == 6


def test_length_limit_cuts_names_strings_array_items_and_status() -> None:
    limits = RecordLimits(attribute_length=4, attribute_count=10, events=10, links=10)
    span = one_span(
        name="abcdefgh",
        attributes={"s": "123456", "a": ("xxxxxx", "y"), "n": 123456789},
        status_code=otlp_wire.STATUS_ERROR,
        status_message="boom boom",
        limits=limits,
    )
    assert span.name == "abcd"
    values = {kv.key: kv.value for kv in span.attributes}
    assert values["s"].string_value == "1234"
    assert [v.string_value for v in values["a"].array_value.values] == ["xxxx", "y"]
    assert values["n"].int_value == 123456789
    assert span.status.message == "boom" and span.status.code == 2


def test_a_tuple_seen_before_is_cut_by_each_limit() -> None:
    """Tuples of strings are remembered once encoded, per string limit."""
    for length, expected in ((3, ["abc", "x"]), (100, ["abcdef", "x"]), (3, ["abc", "x"])):
        limits = RecordLimits(attribute_length=length)
        span = one_span(attributes={"t": ("abcdef", "x")}, limits=limits)
        assert [v.string_value for v in span.attributes[0].value.array_value.values] == expected


def test_odd_values_never_break_a_batch() -> None:
    span = one_span(
        name="",
        end_ns=5,  # before its start: clamped, as a backend would refuse it
        attributes={
            "big": 2**70,
            "neg": -1,
            "lone": "\ud800x",
            "lones": ("ok", "\ud800x"),
            "nested": ("a", ["b"]),  # unhashable: no cache of tuples takes it
            "none": None,
            "obj": object,
            # lengths past one varint byte, and an int of a subclass
            "long": "é" * 300,
            "level": _Level.HIGH,
        },
    )
    values = {kv.key: kv.value for kv in span.attributes}
    assert span.name == "(empty)"
    assert span.end_time_unix_nano == span.start_time_unix_nano == 10
    assert values["big"].string_value == str(2**70)
    assert values["neg"].int_value == -1
    assert values["lone"].string_value == "\ufffdx"  # as names.clean replaces it
    assert [v.string_value for v in values["lones"].array_value.values] == ["ok", "\ufffdx"]
    assert [v.string_value for v in values["nested"].array_value.values] == ["a", "['b']"]
    assert "none" not in values
    assert values["obj"].string_value == str(object)
    assert values["long"].string_value == "é" * 300
    assert values["level"].int_value == 3


class _Level(enum.IntEnum):
    HIGH = 3


def test_resource_and_scope_wrap_every_span() -> None:
    request = decode([otlp_wire.span(**_minimal(i)) for i in range(1, 4)])
    (resource_spans,) = request.resource_spans
    attrs = {kv.key: kv.value for kv in resource_spans.resource.attributes}
    assert attrs["service.instance.id"].string_value == "é-1"
    assert attrs["dask.workers"].int_value == 3
    (scope_spans,) = resource_spans.scope_spans
    assert scope_spans.scope.name == "otel_spans"
    assert [s.span_id for s in scope_spans.spans] == [i.to_bytes(8, "big") for i in (1, 2, 3)]


def _minimal(span_id: int) -> dict[str, Any]:
    return {
        "name": "x",
        "trace_id": 7,
        "span_id": span_id,
        "parent_span_id": 0,
        "start_ns": 1,
        "end_ns": 2,
        "attributes": {},
        "limits": UNLIMITED,
    }


# -- log records --------------------------------------------------------------------------
bodies = st.recursive(
    st.one_of(st.none(), scalars, st.binary(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def log_fields(draw: st.DrawFn) -> dict[str, Any]:
    correlated = draw(st.booleans())
    return {
        "time_ns": draw(times),
        "severity_number": draw(st.integers(min_value=1, max_value=24)),
        "severity_text": draw(st.sampled_from(["INFO", "ERROR", ""])),
        "body": draw(bodies),
        "attributes": draw(attribute_maps),
        "trace_id": draw(ids128) if correlated else 0,
        "span_id": draw(ids64) if correlated else 0,
        "event_name": draw(st.sampled_from(["dask.event", "dask.task.erred", ""])),
    }


def sdk_log(fields: dict[str, Any]) -> Any:
    from opentelemetry import trace
    from opentelemetry._logs import LogRecord, SeverityNumber
    from opentelemetry.sdk._logs import ReadableLogRecord
    from opentelemetry.trace import NonRecordingSpan

    context = None
    if fields["trace_id"]:
        span = NonRecordingSpan(
            SpanContext(fields["trace_id"], fields["span_id"], True, TraceFlags(1))
        )
        context = trace.set_span_in_context(span)
    record = LogRecord(
        timestamp=fields["time_ns"],
        observed_timestamp=fields["time_ns"],
        context=context,
        severity_text=fields["severity_text"],
        severity_number=SeverityNumber(fields["severity_number"]),
        body=fields["body"],
        attributes=fields["attributes"],
        event_name=fields["event_name"] or None,
    )
    return ReadableLogRecord(
        record,
        resource=Resource(RESOURCE),
        instrumentation_scope=InstrumentationScope("otel_spans"),
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(log_fields(), min_size=1, max_size=3))
def test_same_log_request_as_the_sdk_encoder(logs: list[dict[str, Any]]) -> None:
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    encoder = otlp_wire.RequestEncoder(RESOURCE, "otel_spans")
    ours = encoder.request([log_wire.log_record(limits=UNLIMITED, **fields) for fields in logs])
    assert ExportLogsServiceRequest.FromString(ours) == encode_logs([sdk_log(f) for f in logs])


def test_log_limits_cut_strings_at_any_depth_and_count_attributes() -> None:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    # the log record limits (OTEL_LOGRECORD_ATTRIBUTE_*), not the spans'
    limits = RecordLimits(log_attribute_length=3, log_attribute_count=1)
    record = log_wire.log_record(
        time_ns=1,
        severity_number=9,
        severity_text="INFO",
        body={"key": ["abcdef", {"deep": "ghijkl"}]},
        attributes={"a": "long value", "b": "dropped"},
        limits=limits,
    )
    request = otlp_wire.RequestEncoder({}, "otel_spans").request([record])
    decoded = ExportLogsServiceRequest.FromString(request)
    log = decoded.resource_logs[0].scope_logs[0].log_records[0]
    first, second = log.body.kvlist_value.values[0].value.array_value.values
    assert first.string_value == "abc"
    assert second.kvlist_value.values[0].value.string_value == "ghi"
    assert [kv.value.string_value for kv in log.attributes] == ["lon"]
    assert log.dropped_attributes_count == 1
    assert not log.trace_id and not log.span_id and log.flags == 0


def test_a_request_of_several_scopes_and_long_records() -> None:
    """Lengths past one byte at every level: records, scopes, the resource's entry."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    encoder = otlp_wire.RequestEncoder(RESOURCE, "otel_spans", "1.2", "https://schema")
    records = [
        log_wire.log_record(
            time_ns=i,
            severity_number=9,
            severity_text="INFO",
            body="x" * 200 * i,
            attributes={},
            limits=UNLIMITED,
        )
        for i in range(1, 4)
    ]
    scopes = [(b"", records[:1]), (otlp_wire.scope("app.db"), records[1:]), (b"", [])]
    request = ExportLogsServiceRequest.FromString(encoder.scoped_request(scopes))
    (resource_logs,) = request.resource_logs
    assert {kv.key for kv in resource_logs.resource.attributes} == set(RESOURCE)
    assert [s.scope.name for s in resource_logs.scope_logs] == [
        "otel_spans",
        "app.db",
        "otel_spans",
    ]
    assert resource_logs.scope_logs[0].scope.version == "1.2"
    assert all(s.schema_url == "https://schema" for s in resource_logs.scope_logs)
    times = [[r.time_unix_nano for r in s.log_records] for s in resource_logs.scope_logs]
    assert times == [[1], [2, 3], []]
    assert resource_logs.scope_logs[1].log_records[1].body.string_value == "x" * 600
