"""Dask's transitions hold to what the transition hook assumes of them
(``otel_spans/scheduler/task_states.py``)."""

from __future__ import annotations

from distributed.scheduler import SchedulerState

from otel_spans.scheduler.task_states import ACTIVE_STATES, WATCHED_STATES


def test_processing_is_entered_from_an_active_state_only() -> None:
    """The hook does not follow a task into ``processing``: its span was marked active
    when the task entered the state it comes from. A transition into ``processing``
    from anywhere else (``released`` included: a transition through ``released``
    reaches plugins as ``released → finish``) would break that."""
    table = SchedulerState._TRANSITIONS_TABLE
    into_processing = {start for start, finish in table if finish == "processing"}
    assert into_processing, "Dask names no transition into processing"
    assert into_processing <= ACTIVE_STATES
    assert "processing" not in WATCHED_STATES
