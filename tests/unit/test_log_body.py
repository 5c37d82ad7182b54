"""A log body written in one pass is the body bounded, then encoded: the same bytes."""

from __future__ import annotations

import enum
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_spans.export.protobuf import nested_value
from otel_spans.records import LogEntry
from otel_spans.settings import RecordLimits
from otel_spans.telemetry import logs
from otel_spans.telemetry.log_body import encoded_body, safe_body


class _Level(enum.IntEnum):
    HIGH = 3


class _Text(str):
    pass


class _BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no")


odd = st.one_of(
    st.sampled_from([_Level.HIGH, _Text("sub"), "\ud800x", "\ud83d\ude00", b"\xff" * 9]),
    st.builds(_BadRepr),
    st.builds(object),
)
scalars = st.one_of(
    st.none(),
    st.text(max_size=12),
    st.booleans(),
    st.integers(),  # past int64 too: written as text
    st.floats(),
    st.binary(max_size=12),
    odd,
)
keys = st.one_of(st.text(max_size=12), st.integers(), st.just(_Text("k")), st.just(("t", 1)))
bodies = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.lists(inner, max_size=5).map(tuple),
        st.frozensets(st.integers(), max_size=3),
        st.dictionaries(keys, inner, max_size=5),
    ),
    max_leaves=30,
)


@settings(max_examples=500, deadline=None)
@given(bodies, st.integers(min_value=1, max_value=14))
def test_one_pass_writes_what_bounding_then_encoding_writes(body: Any, max_length: int) -> None:
    assert encoded_body(body, max_length) == nested_value(safe_body(body, max_length), max_length)


def test_the_bounds_hold_in_one_pass() -> None:
    deep: Any = "leaf"
    for _ in range(6):
        deep = {"k": [deep]}
    cases = [
        deep,  # past the depth limit: the rest as text
        list(range(150)),  # past the item limit
        {str(i): i for i in range(150)},
        {"long-key-" * 3: 1, "long-key-" * 3 + "x": 2},  # keys that meet once cut
        {1: "a", "1": "b"},  # keys that meet as text
        {"flat": 1, "pair": "x" * 11 + "\ud83d\ude00"},  # a surrogate pair at the cut
        {"flat": 1.5, "none": None, "big": 2**70, "yes": True},
    ]
    for body in cases:
        assert encoded_body(body, 12) == nested_value(safe_body(body, 12), 12)


def test_a_profile_body_keeps_its_own_length() -> None:
    """A body with a limit of its own (a profile) is cut by that limit, then by the
    attribute limit when it is shorter, as before the one-pass encoder."""
    limits = RecordLimits(log_attribute_length=5)
    entry = LogEntry(1, 9, "INFO", "abcdefgh", (), "e", body_length=3)
    one = logs.log_record(entry, limits)
    assert b"abc" in one and b"abcd" not in one
    entry = LogEntry(1, 9, "INFO", "abcdefgh", (), "e", body_length=7)
    assert b"abcde" in logs.log_record(entry, limits)
    assert b"abcdef" not in logs.log_record(entry, limits)
