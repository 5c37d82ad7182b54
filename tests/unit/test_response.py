"""The partial success read by hand from a response's bytes, against the generated classes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from otel_spans.export.response import partial_success

RESPONSES = [
    (ExportTraceServiceResponse, "rejected_spans"),
    (ExportLogsServiceResponse, "rejected_log_records"),
    (ExportMetricsServiceResponse, "rejected_data_points"),
]
# Unknown fields a newer collector may add, at both levels: varint, fixed64, bytes, fixed32.
unknown = st.sampled_from([b"", b"\x18\x05", b"\x21" + bytes(8), b"\x2a\x02ab", b"\x35" + bytes(4)])


@settings(max_examples=200, deadline=None)
@given(
    which=st.sampled_from(RESPONSES),
    rejected=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    message=st.text(max_size=40),
    extra_outer=unknown,
    extra_inner=unknown,
)
def test_reads_what_the_generated_classes_read(
    which: tuple[type, str], rejected: int, message: str, extra_outer: bytes, extra_inner: bytes
) -> None:
    response_type, field = which
    response = response_type()
    setattr(response.partial_success, field, rejected)
    response.partial_success.error_message = message
    inner = response.partial_success.SerializeToString() + extra_inner
    body = extra_outer + b"\x0a" + _varint(len(inner)) + inner
    parsed = response_type.FromString(body).partial_success
    assert partial_success(body) == (getattr(parsed, field), parsed.error_message)
    assert partial_success(body) == (rejected, message)


def test_an_empty_response_is_a_plain_success() -> None:
    assert partial_success(b"") == (0, "")
    assert partial_success(b"\x0a\x00") == (0, "")


def test_repeated_partial_successes_merge_as_protobuf_does() -> None:
    body = b"\x0a\x02\x08\x03" + b"\x0a\x03\x12\x01x"
    assert partial_success(body) == (3, "x")
    assert ExportTraceServiceResponse.FromString(body).partial_success.rejected_spans == 3


@pytest.mark.parametrize("body", [b"\x0a\x05\x08", b"\x08", b"\x0a", b"\x0b", b"<html>"])
def test_foreign_bytes_raise(body: bytes) -> None:
    with pytest.raises((ValueError, IndexError)):
        partial_success(body)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
