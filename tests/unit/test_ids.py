"""The id derivation is part of the contract (docs/telemetry.md): pin every scheme's bytes.

The scheduler and the workers compute these ids independently; a change to any scheme
breaks the nesting of worker spans under task spans, so each is pinned here from its
documented recipe and a literal value.
"""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from otel_spans import ids

UUID = "5dc9b908-116b-49a5-b0d7-5a681f49a111"


def _span(text: str) -> int:
    return int.from_bytes(hashlib.sha256(b"otel-spans/span/" + text.encode()).digest()[:8], "big")


def test_trace_id_of_a_workflow() -> None:
    expected = int.from_bytes(
        hashlib.sha256(b"otel-spans/trace/" + UUID.encode()).digest()[:16], "big"
    )
    assert ids.workflow_trace_id(UUID) == expected
    assert f"{ids.workflow_trace_id(UUID):032x}" == "b4bc6ad0e0befa1a6ac128ef6b58a75b"


def test_span_id_schemes() -> None:
    cases = {
        ids.dask_span_id(UUID): f"{UUID}",
        ids.continuation_span_id(UUID, 2): f"{UUID}/continuation/2",
        ids.task_group_span_id(UUID, "inc-abc"): f"{UUID}/group/inc-abc",
        ids.task_group_span_id(UUID, "inc-abc", 1): f"{UUID}/group/inc-abc/1",
        ids.task_span_id(UUID, "('inc-abc', 3)"): f"{UUID}/task/('inc-abc', 3)/1",
        ids.phase_span_id(12345, 0): "12345/phase/0",
    }
    for got, text in cases.items():
        assert got == _span(text), text
    assert len(cases) == 6  # no two schemes collide on these inputs


def test_literal_values() -> None:
    """Literal bytes, so that a change of the hashing itself is caught too."""
    assert f"{ids.dask_span_id(UUID):016x}" == "d1c293f68d5669e0"
    assert f"{ids.task_span_id(UUID, 'x'):016x}" == "340743bafa3aaed1"


@given(st.text(), st.integers(min_value=1, max_value=10**6))
def test_ids_are_valid_deterministic_and_distinct_per_generation(uuid: str, n: int) -> None:
    trace_id = ids.workflow_trace_id(uuid)
    assert 0 < trace_id < 2**128
    assert trace_id == ids.workflow_trace_id(uuid)
    span_id = ids.continuation_span_id(uuid, n)
    assert 0 < span_id < 2**64
    assert span_id == ids.continuation_span_id(uuid, n)
    assert span_id != ids.continuation_span_id(uuid, n + 1)
    assert span_id != ids.dask_span_id(uuid)


def test_lone_surrogates_hash() -> None:
    assert ids.workflow_trace_id("\udcff") != ids.workflow_trace_id("\udcfe")
