"""A span's identity when first seen (``export_inputs.track_of``): what it remembers
between spans (its root's trace id, the task policies of the settings) never gives one
span another's answer, across many workflows and several schedulers' settings."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

from otel_spans import ids
from otel_spans.config import Settings
from otel_spans.scheduler import export_inputs, span_state
from otel_spans.scheduler.sampling import Policy
from otel_spans.settings import TaskRule, TaskSettings


class NoCallers:
    def get(self, uuid: str) -> None:
        return None

    def origin(self, root_uuid: str) -> None:
        return None


def test_each_span_gets_its_own_ids_and_its_roots_trace() -> None:
    settings = Settings.from_config(environ={})
    # More workflows than the trace ids remembered, spans of two interleaved.
    roots: list[Any] = [
        SimpleNamespace(id=str(uuid.uuid4()), name=(f"wf-{i}",), parent=None) for i in range(150)
    ]
    for i, root in enumerate(roots):
        other = roots[i - 70]
        for parent in (root, other, root):
            span = SimpleNamespace(id=str(uuid.uuid4()), name=(*parent.name, "x"), parent=parent)
            identity = export_inputs.track_of(span, parent, settings, NoCallers())  # type: ignore[arg-type]
            assert identity.trace_id == ids.workflow_trace_id(parent.id)
            assert identity.otel_span_id == ids._span_id(span.id)
            assert identity.tags == (*parent.name, "x")


def tasks(mode: str, *rules: tuple[str, str], slowest: int = 5) -> TaskSettings:
    return TaskSettings(
        mode,  # type: ignore[arg-type]
        slowest,
        0.5,
        100,
        0.01,
        tuple(TaskRule(match, rule_mode) for match, rule_mode in rules),  # type: ignore[arg-type]
    )


def test_task_policy_follows_the_settings_it_is_given() -> None:
    a = tasks("sampled", ("etl/*", "all"), ("*/skip", "none"))
    b = tasks("all", slowest=9)
    cases = [
        (a, ("etl", "load"), Policy("all", 5, 0.5, 100, 0.01)),
        (a, ("x", "skip"), Policy("none", 5, 0.5, 100, 0.01)),
        (a, ("x",), Policy("sampled", 5, 0.5, 100, 0.01)),
        (b, ("etl", "load"), Policy("all", 9, 0.5, 100, 0.01)),
        (a, ("etl", "y"), Policy("all", 5, 0.5, 100, 0.01)),
        (tasks("sampled", slowest=5), ("x",), Policy("sampled", 5, 0.5, 100, 0.01)),
        (b, ("x",), Policy("all", 9, 0.5, 100, 0.01)),
    ]
    for settings, tags, expected in cases * 2:
        assert span_state.task_policy(settings, tags) == expected
    # Spans of one scheduler share its policies rather than each building one.
    assert span_state.task_policy(a, ("q",)) is span_state.task_policy(a, ("r",))


def test_spans_of_one_name_share_tags_that_settings_and_types_decide() -> None:
    """Tags and policy remembered by name: the same answer for every span of a name
    under one settings, a fresh one under others, and names whose tags only compare
    equal (1, True, 1.0) each cleaned on their own."""
    short = Settings.from_config({"max-attribute-length": 3}, environ={})
    rules = Settings.from_config(
        {"traces": {"tasks": {"rules": [{"match": "etl*", "mode": "all"}]}}}, environ={}
    )
    cases: list[tuple[Settings, tuple[Any, ...], tuple[str, ...], str]] = [
        (rules, ("etl", "load"), ("etl", "load"), "all"),
        (short, ("etl", "load"), ("etl", "loa"), "sampled"),
        (rules, ("x",), ("x",), "sampled"),
        (rules, (1,), ("1",), "sampled"),
        (rules, (True,), ("True",), "sampled"),
        (rules, (1.0,), ("1.0",), "sampled"),
        (short, ("etl", "load"), ("etl", "loa"), "sampled"),
    ]
    for settings, name, tags, mode in cases * 2:
        root = SimpleNamespace(id=str(uuid.uuid4()), name=name, parent=None)
        identity = export_inputs.track_of(root, root, settings, NoCallers())  # type: ignore[arg-type]
        assert identity.tags == tags
        assert identity.policy == span_state.task_policy(settings.traces.tasks, tags)
        assert identity.policy.mode == mode
