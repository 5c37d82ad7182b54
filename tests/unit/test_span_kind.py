"""Span kinds: the root a remote caller handed over is a CONSUMER, everything else
INTERNAL (why CONSUMER, not SERVER: docs/trace-context.md)."""

from __future__ import annotations

from dataclasses import replace

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otel_spans.records import SpanRecord
from otel_spans.settings import RecordLimits
from otel_spans.telemetry.traces import dask_span
from tests.support.records import decoded_span, span_record

ROOT = span_record(tags=("nightly",), parent_span_id=3, done=True, parent_remote=True)


def kind_of(record: SpanRecord) -> int:
    kind: int = decoded_span(dask_span(record, limits=RecordLimits())).kind
    return kind


def test_a_root_handed_over_by_a_remote_caller_is_a_consumer() -> None:
    assert kind_of(replace(ROOT, consumer=True)) == Span.SPAN_KIND_CONSUMER


def test_every_other_dask_span_is_internal() -> None:
    assert kind_of(ROOT) == Span.SPAN_KIND_INTERNAL
