"""What is kept per tracked Dask span: few objects for the garbage collector to walk."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from otel_spans.scheduler import memory
from otel_spans.scheduler.memory import MAX_LOST_EVENTS, SpanMemory
from otel_spans.scheduler.sampling import Policy
from otel_spans.scheduler.span_state import TrackedSpan, finished_key


def track() -> TrackedSpan:
    return TrackedSpan("u", ("etl",), 1, 2, Policy(), is_root=True)


def test_a_track_is_its_own_identity() -> None:
    t = track()
    assert t.identity is t
    assert (t.uuid, t.tags, t.trace_id, t.otel_span_id) == ("u", ("etl",), 1, 2)


def test_finished_keys_are_shared_and_leave_the_counts_untracked() -> None:
    key = finished_key("load", "memory")
    assert key == ("load", "memory")
    assert finished_key("load", "memory") is key
    assert finished_key("load", "erred") == ("load", "erred")
    gc.collect()  # the collector stops tracking a tuple of strings it has seen
    t = track()
    t.finished[finished_key("load", "memory")] = 1
    assert not gc.is_tracked(t.finished)


def test_series_of_the_first_prefix_inline_the_others_by_prefix() -> None:
    t = track()
    first: Any = object()
    second: Any = object()
    assert t.series_of("load") is None
    t.keep_series("load", first)
    t.keep_series("step", second)
    assert t.series_of("load") is first
    assert t.series_of("step") is second
    assert t.duration_series == {"step": second}
    t.forget_series()
    assert t.series_of("load") is None and t.series_of("step") is None


def test_lost_events_are_bounded() -> None:
    memory = track().memory
    assert memory.lost_events == ()
    events: list[Any] = [object() for _ in range(MAX_LOST_EVENTS + 2)]
    for event in events:
        memory.add_lost_event(event)
    assert memory.lost_events == tuple(events[:MAX_LOST_EVENTS])
    assert memory.lost_events_dropped == 2


def test_the_first_group_inline_the_others_by_name_at_most_max_groups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(memory, "MAX_GROUPS", 3)
    ledger = SpanMemory()
    kept = [ledger.group(f"g{i}") for i in range(5)]
    assert [g is not None for g in kept] == [True, True, True, False, False]
    assert ledger.first is kept[0] and ledger.group_of("g0") is kept[0]
    assert ledger.group_of("g2") is kept[2] and ledger.group_of("g3") is None
    assert list(ledger.groups) == ["g1", "g2"]
