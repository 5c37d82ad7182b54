"""Dask's events as log records (``scheduler/dask_events.py``): the attributes
remembered per (topic, action) stay each record's own, events naming a task or a span
carry its trace, and what cannot be remembered (an action of any type) still goes out."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import dask.config
import pytest

from otel_spans import semconv
from otel_spans.config import Settings
from otel_spans.records import LogEntry
from otel_spans.scheduler import dask_events
from otel_spans.scheduler.dask_events import DaskEvents
from otel_spans.scheduler.sampling import Policy
from otel_spans.scheduler.span_state import SpanIdentity

TRACKED = SpanIdentity("span-1", ("etl",), 0xABC, 0xDEF, Policy(), sampled=True)


def events(**config: Any) -> tuple[DaskEvents, list[LogEntry]]:
    with dask.config.set({"otel-spans": {}}):
        settings = Settings.from_config(config, environ={})
    group = SimpleNamespace(span_id="span-1")
    scheduler = SimpleNamespace(tasks={"k-1": SimpleNamespace(group=group)})
    out: list[LogEntry] = []
    identity = {"span-1": TRACKED}.get
    return DaskEvents(scheduler, settings, out.append, identity, None), out  # type: ignore[arg-type]


def attrs(entry: LogEntry) -> dict[str, object]:
    return dict(entry.attributes)


def test_each_record_has_its_own_topic_and_action() -> None:
    ev, out = events()
    cases = [
        ("scheduler", "update-graph"),
        ("Client-1", "update-graph"),
        ("scheduler", "gather"),
        ("all", "gather"),
        ("scheduler", None),
        ("scheduler", 3),
        ("all", "gather"),
    ]
    for topic, action in cases * 2:
        msg = {"n": 1} if action is None else {"action": action, "n": 1}
        ev.log_event(topic, msg)
    assert len(out) == len(cases) * 2
    for entry, (topic, action) in zip(out, cases * 2, strict=True):
        expected = {semconv.DASK_EVENT_TOPIC: topic}
        if action is not None:
            expected[semconv.DASK_EVENT_ACTION] = str(action)
        assert attrs(entry) == expected
        assert entry.body == ({"n": 1} if action is None else {"action": action, "n": 1})
        assert (entry.trace_id, entry.span_id, entry.sampled) == (0, 0, False)
        assert entry.event_name == semconv.LOG_DASK_EVENT
        assert entry.severity_text == semconv.SEVERITY_INFO.text
        # built field by field (records.log_entry): every field there, in its place
        assert len(entry) == len(LogEntry._fields)
        assert (entry.scope, entry.body_length) == ("", 0)
        assert isinstance(entry.time_ns, int)
        assert entry.severity_number == semconv.SEVERITY_INFO.number


def test_an_unhashable_action_is_logged_not_remembered() -> None:
    ev, out = events()
    ev.log_event("scheduler", {"action": {"odd": 1}})
    ev.log_event("scheduler", {"action": ["odd"]})
    assert [attrs(e)[semconv.DASK_EVENT_ACTION] for e in out] == ["{'odd': 1}", "['odd']"]


def test_remembered_attributes_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dask_events, "_MAX_TOPICS", 5)
    ev, out = events()
    for i in range(40):
        ev.log_event(f"tcp://w:{i % 12}", {"action": f"a{i % 3}"})
        assert len(ev._topic_attributes) <= 5
    for i, entry in enumerate(out):
        assert attrs(entry) == {
            semconv.DASK_EVENT_TOPIC: f"tcp://w:{i % 12}",
            semconv.DASK_EVENT_ACTION: f"a{i % 3}",
        }


def test_events_naming_a_tracked_key_or_span_carry_its_trace() -> None:
    ev, out = events()
    ev.log_event("task-erred", {"key": "k-1"})
    ev.log_event("scheduler", {"action": "x", "span_id": "span-1"})
    ev.log_event("scheduler", {"action": "x", "key": "unknown", "span_id": "other"})
    ev.log_event("scheduler", {"action": "x", "key": ["unhashable"]})
    got = [(e.trace_id, e.span_id, e.sampled) for e in out]
    assert got == [(0xABC, 0xDEF, True), (0xABC, 0xDEF, True), (0, 0, False), (0, 0, False)]


def test_one_message_under_two_topics_is_one_record_and_bodies_are_copies() -> None:
    ev, out = events(capture={"exceptions": "type"})
    msg = {"action": "update-graph", "exception": "secret", "n": 1}
    ev.log_event("scheduler", msg)
    ev.log_event("Client-1", msg)
    ev.log_event("scheduler", "a plain string event")
    assert len(out) == 2
    assert out[0].body == {"action": "update-graph", "n": 1}
    assert out[0].body is not msg
    assert out[1].body == "a plain string event"
    assert attrs(out[1]) == {semconv.DASK_EVENT_TOPIC: "scheduler"}


def test_topics_not_logged_stay_unlogged() -> None:
    ev, out = events(logs={"topics": ["scheduler", "tcp://*"], "exclude-topics": ["tcp://x*"]})
    for _ in range(2):
        for topic in ("scheduler", "all", "tcp://w:1", "tcp://x:1"):
            ev.log_event(topic, {"action": "update-graph"})
            ev.log_event(topic, {"action": 7})
    expected = ["scheduler", "scheduler", "tcp://w:1", "tcp://w:1"] * 2
    assert [attrs(e)[semconv.DASK_EVENT_TOPIC] for e in out] == expected
