"""The encoder's bytes, pinned: its fast paths write exactly what the generic
definition writes, and a realistic batch encodes to the same bytes as before.

``test_otlp_wire.py`` compares decoded messages with the SDK's; these compare bytes,
so that work on the encoder's speed cannot change what a collector receives, not even
in ways that decode alike (field order, a length written in more bytes).
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_spans import semconv
from otel_spans.export import protobuf, wire
from otel_spans.export.protobuf import (
    KV_KEY,
    KV_VALUE,
    any_value,
    key_values,
    length_delimited,
    message,
    utf8,
)
from otel_spans.records import (
    Finding,
    LinkRecord,
    LogEntry,
    MemoryRecord,
    SpanEventRecord,
    WorkflowAnalysis,
)
from otel_spans.settings import RecordLimits
from otel_spans.telemetry import logs, traces
from otel_spans.telemetry.log_body import bounded_attributes, safe_body
from tests.support.records import group_record, span_record


def reference(
    field_tag: bytes, attributes: dict[str, Any], max_count: int, max_length: int
) -> tuple[bytes, int]:
    """What :func:`key_values` writes, by definition: one ``KeyValue`` after another,
    each value through :func:`any_value`; ``None`` left out; the first kept."""
    pairs = [(k, v) for k, v in attributes.items() if v is not None]
    kept = pairs[:max_count]
    encoded = b""
    for name, value in kept:
        pair = message(KV_KEY, utf8(name, len(name))) + message(
            KV_VALUE, any_value(value, max_length)
        )
        encoded += message(field_tag, pair)
    return encoded, len(pairs) - len(kept)


_TEXT = st.text(st.characters(codec="utf-8"), max_size=140) | st.sampled_from(
    ["", "a", "x" * 120, "x" * 130, "é" * 70, "\ud800", "a\ud83d\ude00b", "é" + "\ud83d\ude00" * 5]
)
_INTS = st.integers(-(2**70), 2**70) | st.sampled_from(
    [0, 1, 127, 128, 16383, 16384, 2**56, 2**63 - 1, 2**63, -1, -(2**63), -(2**63) - 1]
)
_SCALARS = st.none() | st.booleans() | _INTS | st.floats(allow_nan=False) | _TEXT
_VALUES = (
    _SCALARS
    | st.tuples(_TEXT, _TEXT)
    | st.lists(_TEXT, max_size=4).map(tuple)
    | st.lists(_SCALARS, max_size=4)
    | st.lists(_TEXT, max_size=4)
    | st.builds(object)
)
_KEYS = st.text(st.characters(codec="utf-8"), min_size=1, max_size=130) | st.sampled_from(
    ["k", "dask.span.task_count", "k" * 100, "k" * 110, "k" * 117, "k" * 124, "k" * 126]
)


@settings(max_examples=300, deadline=None)
@given(
    attributes=st.dictionaries(_KEYS, _VALUES, max_size=8),
    field=st.sampled_from([1, 3, 4, 6, 9, 17]),
    max_count=st.sampled_from([0, 2, 128]),
    max_length=st.sampled_from([1, 8, 100, 4096]),
)
def test_key_values_writes_what_the_definition_writes(
    attributes: dict[str, Any], field: int, max_count: int, max_length: int
) -> None:
    field_tag = length_delimited(field)
    expected = reference(field_tag, attributes, max_count, max_length)
    # Twice: the second time from whatever the first one cached.
    assert key_values(field_tag, attributes, max_count, max_length) == expected
    assert key_values(field_tag, attributes, max_count, max_length) == expected


@settings(max_examples=200, deadline=None)
@given(
    attributes=st.lists(st.tuples(_KEYS, _VALUES | st.lists(_TEXT, max_size=120).map(tuple))),
    max_length=st.sampled_from([1, 8, 100, 4096]),
)
def test_log_attributes_kept_plain_encode_as_bounded_ones(
    attributes: list[tuple[str, Any]], max_length: int
) -> None:
    """``bounded_attributes`` leaves plain values as they are: the encoder must write
    them as it writes ``safe_body``'s of them."""
    _same_bytes_bounded_or_kept(attributes, max_length)


@pytest.mark.parametrize("max_length", range(1, 9))
def test_log_attributes_that_safe_body_cuts_in_a_surrogate_pair(max_length: int) -> None:
    pair = "\ud83d\ude00"  # one character held as two code points, as JSON may give it
    attributes = [("s", "é" + pair * 4), ("t", (pair * 4, "x")), ("l", [pair * 4])]
    _same_bytes_bounded_or_kept(attributes, max_length)


def _same_bytes_bounded_or_kept(attributes: list[tuple[str, Any]], max_length: int) -> None:
    field_tag = length_delimited(6)
    bounded = {k: safe_body(v, max_length) for k, v in attributes}
    expected = key_values(field_tag, bounded, 128, max_length)
    kept = bounded_attributes(attributes, max_length)
    assert key_values(field_tag, kept, 128, max_length) == expected


def test_key_values_after_its_caches_were_emptied() -> None:
    attributes = {"a": 1, "b": "x", "c": ("p", "q"), "d": 1.5, "e": True}
    field_tag = length_delimited(9)
    expected = reference(field_tag, attributes, 128, 64)
    key_values(field_tag, attributes, 128, 64)
    protobuf._KEYS.clear()
    protobuf._TABLES.clear()
    assert key_values(field_tag, attributes, 128, 64) == expected


T0 = 1_795_873_418_678_176_512
TRACE = 199477837004130292216942002301427513966
ADVICE = (
    "Most threads had nothing to run: the graph is narrower than the cluster, so its "
    "chain of dependent tasks set the wall time; use fewer workers, or split the work "
    "along that chain into parallel tasks."
)
FINDING = Finding(
    id="underutilised",
    severity="warning",
    subject="request-1",
    subject_kind="workflow",
    evidence=(("efficiency", 0.4823), ("mean_parallelism", 0.004), ("threads", 2)),
    share=0.9956,
    advice=ADVICE,
)


def _root() -> Any:
    """The root of one of ``benchmarks.per_span``'s workflows, as the scheduler exports it."""
    return span_record(
        uuid="f7f13c6d-9b13-429f-9687-bb602b266c08",
        tags=("request-1",),
        trace_id=TRACE,
        span_id=17961256515187693793,
        start_ns=T0,
        end_ns=T0 + 165_618_944,
        enqueued_ns=T0,
        compute_start_ns=T0 + 24_449_792,
        done=True,
        states=(("memory", 20),),
        tasks=20,
        task_groups=2,
        nbytes=560,
        task_duration=0.000729,
        active_cpu_seconds=0.3312382698059082,
        events=(
            SpanEventRecord("dask.cluster.nthreads", T0, (("dask.nthreads", 2),)),
            SpanEventRecord(
                "dask.diagnosis.finding",
                T0 + 165_618_944,
                (
                    ("dask.diagnosis.finding.id", "underutilised"),
                    ("dask.diagnosis.finding.severity", "warning"),
                    ("dask.diagnosis.finding.share", 0.9956),
                    ("dask.diagnosis.finding.advice", ADVICE),
                    ("dask.diagnosis.evidence.threads", 2),
                ),
            ),
        ),
        analysis=WorkflowAnalysis(
            sequential_time=0.000729,
            critical_path_groups=("load-544fa992dd904891", "step-544fa992dd904891"),
            critical_path_length=0.229897216,
            efficiency=0.48229469409354747,
            speedup=0.004401665305323347,
            bottlenecks=("load", "step"),
            bottleneck_shares=("load=0.627", "step=0.373"),
            findings=(FINDING,),
            worker_threads=2,
        ),
        client_id="Client-b2ba837f-eb31-11f1-9f2b-02fc00000001",
        run_breakdown=(("dask.span.run.time.idle_or_other_spans", 0.17148380979779176),),
        footprint=MemoryRecord(tree_peak=560),
    )


def _child() -> Any:
    return span_record(
        uuid="062c81fd-15c5-4678-81e4-780e2ddf5e20",
        tags=("request-1", "load", "step"),
        trace_id=TRACE,
        span_id=2066611797468107058,
        parent_span_id=17961256515187693793,
        start_ns=T0 + 1_000,
        end_ns=T0 + 99_000_000,
        enqueued_ns=T0 + 1_000,
        compute_start_ns=T0 + 20_000_000,
        done=True,
        states=(("memory", 10), ("erred", 1)),
        tasks=11,
        task_groups=1,
        nbytes=280,
        task_duration=0.000495,
        active_cpu_seconds=0.22871112823486328,
        events=(
            SpanEventRecord(
                "dask.computation",
                T0,
                (("dask.computation.id", "ec2630d9-b56d"), ("dask.computation.task_groups", 1)),
            ),
        ),
        links=(LinkRecord(TRACE + 1, 7, (("dask.link.kind", "caller"),), 1, True),),
        run_breakdown=(
            ("dask.span.run.bytes.memory_read", 280.0),
            ("dask.span.run.time.executor", 0.02739674393524183),
        ),
        footprint=MemoryRecord(peak=280, spilled=1e6, pauses=1, pause_seconds=0.5),
    )


def _group() -> Any:
    return group_record(
        name="step-5c48652b5f634dcdbe7b1427db885b6b",
        prefix="step",
        trace_id=TRACE,
        span_id=4633526669710982690,
        parent_span_id=2066611797468107058,
        start_ns=T0 + 20_000_000,
        end_ns=T0 + 90_000_000,
        tasks=10,
        memory=10,
        nbytes=280,
        durations=(("compute", 0.000495),),
        task_spans_dropped=10,
        links=(LinkRecord(TRACE, 166968293874706359, (("dask.link.kind", "dependency"),)),),
        submitted_ns=T0,
        footprint=MemoryRecord(peak=280),
    )


def _logs() -> list[LogEntry]:
    metrics = {
        "tasks": 10,
        "new_tasks": 10,
        "key_collisions": 0,
        "start_timestamp_seconds": 1795873418.5220525,
        "duration_seconds": 0.011804342269897461,
    }
    event = ("dask.event.topic", "scheduler"), ("dask.event.action", "update-graph")
    return [
        LogEntry(
            T0,
            9,
            "INFO",
            {"action": "update-graph", "stimulus_id": "u-1", "metrics": metrics, "status": "OK"},
            event,
            "dask.event",
            sampled=False,
        ),
        LogEntry(
            T0 + 1,
            9,
            "INFO",
            "workflow 'request-1' started, trace 9611c9b8b1d0b9a0",
            (
                ("dask.span.id", "30fcdf91-5889-48a9-9ec0-e167ec0f5438"),
                ("dask.span.tags", ("request-1",)),
                ("dask.span.name", "request-1"),
            ),
            "dask.span.started",
            TRACE,
            17961256515187693793,
        ),
        LogEntry(
            T0 + 2,
            9,
            "INFO",
            {"action": "gather", "count": 10},
            (("dask.event.topic", "all"), ("dask.event.action", "gather")),
            "dask.event",
            sampled=False,
        ),
        LogEntry(
            T0 + 3,
            13,
            "WARN",
            ["a", 1, 2.5, None, {"x": b"\x00", "y": [True]}],
            (("dask.span.name", "request-1"), ("dask.diagnosis.findings", ("underutilised",))),
            "dask.diagnosis",
            TRACE,
            17961256515187693793,
            scope="distributed.scheduler",
        ),
    ]


#: SHA-256 of :func:`test_a_workflows_records_encode_to_the_same_bytes`' requests. An
#: intended change of the encoding (checked against the SDK's by test_otlp_wire.py)
#: writes its new digest here; a change made for speed must leave it as it is.
PINNED = "04c60a41412bbddd766c9ada1d97b7a4e127689111c569e39e501f84c312f485"


def test_a_workflows_records_encode_to_the_same_bytes() -> None:
    limits = RecordLimits()
    resource = {"service.name": "dask", "process.pid": 4242}
    spans = wire.RequestEncoder(resource, semconv.SCOPE_NAME, "1.0", semconv.SCHEMA_URL)
    records = [
        traces.dask_span(_root(), limits=limits),
        traces.dask_span(_child(), limits=limits),
        traces.group_span(_group(), limits=limits),
    ]
    log_request = logs.LogEncoder(resource, semconv.SCOPE_NAME, limits).request(_logs())
    digest = hashlib.sha256(spans.request(records) + log_request).hexdigest()
    assert digest == PINNED
