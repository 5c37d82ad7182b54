"""The hand-written OTLP metrics encoder against the SDK's own encoder, the reference."""

from __future__ import annotations

from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common._internal.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Buckets,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from otel_spans.export.metrics_wire import MetricsEncoder, request_of

int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
uint64 = st.integers(min_value=0, max_value=2**64 - 1)
times = st.integers(min_value=0, max_value=2**64 - 1)
floats = st.floats(allow_nan=False)
scalars = st.one_of(st.text(), st.booleans(), int64, floats)
values = st.one_of(
    scalars,
    st.lists(st.text(), max_size=3).map(tuple),
    st.lists(int64, max_size=3).map(tuple),
    st.lists(floats, max_size=3).map(tuple),
)
attribute_maps = st.dictionaries(st.text(min_size=1, max_size=12), values, max_size=4)
temporalities = st.sampled_from([AggregationTemporality.DELTA, AggregationTemporality.CUMULATIVE])
sint32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)

exemplars = st.lists(
    st.builds(
        Exemplar,
        filtered_attributes=st.one_of(st.none(), attribute_maps),
        value=st.one_of(int64, floats),
        time_unix_nano=times,
        span_id=st.one_of(st.none(), st.integers(min_value=1, max_value=2**64 - 1)),
        trace_id=st.one_of(st.none(), st.integers(min_value=1, max_value=2**128 - 1)),
    ),
    max_size=3,
)
number_points = st.builds(
    NumberDataPoint,
    attributes=attribute_maps,
    start_time_unix_nano=times,
    time_unix_nano=times,
    value=st.one_of(int64, floats),
    exemplars=exemplars,
)
histogram_points = st.builds(
    HistogramDataPoint,
    attributes=attribute_maps,
    start_time_unix_nano=times,
    time_unix_nano=times,
    count=uint64,
    sum=floats,
    bucket_counts=st.lists(uint64, max_size=6),
    explicit_bounds=st.lists(floats, max_size=5),
    min=st.one_of(st.none(), st.floats(allow_nan=False)),
    max=st.one_of(st.none(), st.floats(allow_nan=False)),
    exemplars=exemplars,
)
buckets = st.builds(Buckets, offset=sint32, bucket_counts=st.lists(uint64, max_size=5))
exponential_points = st.builds(
    ExponentialHistogramDataPoint,
    attributes=attribute_maps,
    start_time_unix_nano=times,
    time_unix_nano=times,
    count=uint64,
    sum=floats,
    scale=st.integers(min_value=-10, max_value=20),
    zero_count=uint64,
    positive=buckets,
    negative=buckets,
    flags=st.integers(min_value=0, max_value=2**32 - 1),
    min=st.one_of(st.none(), floats),
    max=st.one_of(st.none(), floats),
    exemplars=exemplars,
)
data = st.one_of(
    st.builds(Sum, st.lists(number_points, max_size=3), temporalities, st.booleans()),
    st.builds(Gauge, st.lists(number_points, max_size=3)),
    st.builds(Histogram, st.lists(histogram_points, max_size=3), temporalities),
    st.builds(ExponentialHistogram, st.lists(exponential_points, max_size=2), temporalities),
)
metrics = st.builds(
    Metric,
    name=st.text(max_size=20),
    description=st.text(max_size=20),
    unit=st.text(max_size=5),
    data=data,
)


@st.composite
def metrics_data(draw: Any) -> MetricsData:
    resources = []
    for i in range(draw(st.integers(min_value=0, max_value=2))):
        # Distinct resources and scopes: the SDK's encoder merges equal ones.
        resource = Resource(
            {**draw(attribute_maps), "resource.index": i},
            schema_url=draw(st.sampled_from(["", "https://opentelemetry.io/schemas/1.26.0"])),
        )
        scopes = [
            ScopeMetrics(
                InstrumentationScope(
                    f"scope-{j}",
                    draw(st.one_of(st.none(), st.text(max_size=8))),
                    draw(st.one_of(st.none(), st.just("https://example.com/s"))),
                    draw(st.one_of(st.none(), attribute_maps)),
                ),
                draw(st.lists(metrics, max_size=3)),
                "",
            )
            for j in range(draw(st.integers(min_value=0, max_value=2)))
        ]
        resources.append(ResourceMetrics(resource, scopes, ""))
    return MetricsData(resources)


@settings(max_examples=300, deadline=None)
@given(metrics_data())
def test_requests_parse_as_the_sdk_encodes_them(data: MetricsData) -> None:
    ours = ExportMetricsServiceRequest.FromString(MetricsEncoder().request(data))
    assert ours == encode_metrics(data)


@settings(max_examples=50, deadline=None)
@given(metrics_data())
def test_the_kept_resource_and_scope_encodings_change_nothing(data: MetricsData) -> None:
    encoder = MetricsEncoder()
    first = encoder.request(data)
    assert encoder.request(data) == first


@settings(max_examples=100, deadline=None)
@given(metrics_data())
def test_metric_pieces_make_the_same_request(data: MetricsData) -> None:
    """The pieces a request too large to send whole is split into, put back together,
    are that request (scopes and resources without metrics aside: no piece has them)."""
    assume(all(sm.metrics for rm in data.resource_metrics for sm in rm.scope_metrics))
    assume(all(rm.scope_metrics for rm in data.resource_metrics))
    encoder = MetricsEncoder()
    pieces = encoder.pieces(data)
    assert request_of(pieces) == encoder.request(data)
    halves = request_of(pieces[: len(pieces) // 2]) + request_of(pieces[len(pieces) // 2 :])
    whole = ExportMetricsServiceRequest.FromString(encoder.request(data))
    parts = ExportMetricsServiceRequest.FromString(halves)
    assert [m for rm in parts.resource_metrics for sm in rm.scope_metrics for m in sm.metrics] == [
        m for rm in whole.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    ]


def test_a_known_request_byte_for_byte() -> None:
    """Field numbers and wire types: a small request against bytes written by hand."""
    point = NumberDataPoint({"k": "v"}, 1, 2, 7)
    metric = Metric("m", "", "s", Sum([point], AggregationTemporality.CUMULATIVE, True))
    scope = InstrumentationScope("sc", "1", "https://s")
    data = MetricsData(
        [ResourceMetrics(Resource({"r": 1}), [ScopeMetrics(scope, [metric], "")], "")]
    )
    attribute = b"\x0a\x01k\x12\x03\x0a\x01v"  # KeyValue{key: "k", value: {string: "v"}}
    number = (
        _delimited(b"\x3a", attribute)  # attributes = 7
        + b"\x11"
        + (1).to_bytes(8, "little")  # start_time_unix_nano = 2, fixed64
        + b"\x19"
        + (2).to_bytes(8, "little")  # time_unix_nano = 3, fixed64
        + b"\x31"
        + (7).to_bytes(8, "little")  # as_int = 6, sfixed64
    )
    sum_ = _delimited(b"\x0a", number) + b"\x10\x02\x18\x01"  # CUMULATIVE, monotonic
    metric_bytes = b"\x0a\x01m\x1a\x01s" + _delimited(b"\x3a", sum_)  # name, unit, sum = 7
    scope_bytes = b"\x0a\x02sc\x12\x011"
    scope_metrics = (
        _delimited(b"\x0a", scope_bytes) + _delimited(b"\x12", metric_bytes) + b"\x1a\x09https://s"
    )
    resource = b"\x0a\x07\x0a\x01r\x12\x02\x18\x01"
    body = _delimited(b"\x0a", resource) + _delimited(b"\x12", scope_metrics)
    assert MetricsEncoder().request(data) == _delimited(b"\x0a", body)


def _delimited(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field written by hand (a payload under 128 bytes: its length
    is one byte), independently of the encoder under test."""
    assert len(payload) < 0x80
    return tag + bytes([len(payload)]) + payload
