"""The id derivation is part of the contract (docs/telemetry.md): pin it."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from otel_spans import ids


def test_documented_derivation() -> None:
    uuid = "5dc9b908-116b-49a5-b0d7-5a681f49a111"
    expected_trace = int.from_bytes(
        hashlib.sha256(b"otel-spans/trace/" + uuid.encode()).digest()[:16], "big"
    )
    expected_span = int.from_bytes(
        hashlib.sha256(b"otel-spans/span/" + uuid.encode()).digest()[:8], "big"
    )
    assert ids.trace_id_for(uuid) == expected_trace
    assert ids.dask_span_id(uuid) == expected_span
    cont = int.from_bytes(
        hashlib.sha256(f"otel-spans/span/{uuid}/continuation/2".encode()).digest()[:8], "big"
    )
    assert ids.dask_span_id(uuid, 2) == cont


@given(st.text(), st.integers(min_value=0, max_value=10**6))
def test_ids_are_valid_deterministic_and_distinct_per_generation(uuid: str, n: int) -> None:
    trace_id = ids.trace_id_for(uuid)
    assert 0 < trace_id < 2**128
    assert trace_id == ids.trace_id_for(uuid)
    span_id = ids.dask_span_id(uuid, n)
    assert 0 < span_id < 2**64
    assert span_id == ids.dask_span_id(uuid, n)
    assert ids.dask_span_id(uuid, n) != ids.dask_span_id(uuid, n + 1)


def test_lone_surrogates_hash() -> None:
    assert ids.trace_id_for("\udcff") != ids.trace_id_for("\udcfe")
