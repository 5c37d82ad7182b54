"""docs/telemetry.md is the contract: every name in semconv.py must be documented there."""

from __future__ import annotations

import re
from pathlib import Path

from otel_spans import semconv

DOC = Path(__file__).parents[2] / "docs" / "telemetry.md"


def emitted_names() -> dict[str, str]:
    return {
        name: value
        for name, value in vars(semconv).items()
        if name.isupper() and isinstance(value, str) and not name.startswith("DEFAULT_")
    }


def test_every_semconv_name_is_documented() -> None:
    text = DOC.read_text()
    missing = {
        name: value
        for name, value in emitted_names().items()
        if f"`{value}`" not in text and not value.endswith(".")
    }
    assert not missing, f"not in docs/telemetry.md: {missing}"


def test_prefix_constants_are_documented_as_patterns() -> None:
    text = DOC.read_text()
    for name, value in emitted_names().items():
        if value.endswith("."):
            assert f"`{value}<" in text, name


def signal_names() -> dict[str, str]:
    """Attribute keys and metric names (event names are left out: by the semantic
    conventions' own example, event ``exception`` with ``exception.type``, an event's
    attributes may live in its name's namespace)."""
    return {
        name: value
        for name, value in emitted_names().items()
        if "." in value
        and " " not in value
        and not value.startswith("{")
        and not name.startswith(("EVENT_", "LOG_"))
    }


def test_no_name_is_also_a_namespace() -> None:
    """The naming rules: a name never coincides with a namespace of another name."""
    names = signal_names()
    namespaces = {value.rstrip(".") for value in names.values() if value.endswith(".")}
    for value in names.values():
        parts = value.rstrip(".").split(".")
        namespaces |= {".".join(parts[:i]) for i in range(1, len(parts))}
    clashes = {name: value for name, value in names.items() if value in namespaces}
    assert not clashes, clashes


def test_one_meaning_per_key() -> None:
    """A key means one thing on every signal: the joined span name on metrics is the
    span attribute of that name, and the tags array has a key of its own."""
    assert semconv.DASK_SPAN_NAME in semconv.METRIC_ATTRIBUTES
    assert semconv.DASK_SPAN_TAGS != semconv.DASK_SPAN_NAME
    assert semconv.DASK_TASK_PREFIX in semconv.METRIC_ATTRIBUTES


def test_one_constant_per_emitted_name() -> None:
    """A name that is emitted on several signals (``dask.task.prefix`` on spans and
    metrics, ``dask.workflow.efficiency`` as an attribute and a histogram) has one
    constant, so a grep for the constant finds every place that emits the name."""
    by_value: dict[str, list[str]] = {}
    for name, value in emitted_names().items():
        by_value.setdefault(value, []).append(name)
    duplicated = {value: names for value, names in by_value.items() if len(names) > 1}
    # the task annotation's key is read, never emitted, and only shares the spelling
    assert duplicated == {semconv.SCOPE_NAME: ["SCOPE_NAME", "ANNOTATION"]}, duplicated


def test_counts_carry_what_they_count_as_their_unit() -> None:
    from otel_spans.telemetry.metrics import COUNTERS

    units = {metric: unit for metric, unit, _ in COUNTERS}
    assert units[semconv.M_SPAN_TASKS] == "{task}"
    assert units[semconv.M_EXECUTE_COUNT] == "{event}"
    assert "1" not in units.values()  # "1" is for ratios only


#: The naming rules' alphabet for attribute keys of ours.
KEY = re.compile(r"[a-z0-9_]+(\.[a-z0-9_]+)*")


def test_dask_names_become_key_parts_of_the_naming_rules() -> None:
    assert semconv.key_part("no-worker") == "no_worker"
    assert semconv.key_part("disk-read") == "disk_read"
    assert semconv.key_part("idle or other spans") == "idle_or_other_spans"
    assert semconv.key_part("Thread-CPU") == "thread_cpu"
    assert semconv.key_part("größe") == "gr__e"  # letters outside a-z too


def test_keys_built_from_dask_names_hold_only_lowercase_digits_underscores() -> None:
    """Dask's hyphenated states and actions (``no-worker``, ``disk-read``) never reach
    an attribute key as they are."""
    from otel_spans.settings import RecordLimits
    from otel_spans.telemetry import traces
    from tests.support.records import decoded_span, group_record, span_record

    record = span_record(
        states=(("memory", 1), ("no-worker", 2), ("processing", 3)), tasks=6, task_groups=1
    )
    span_keys = set(traces.span_attributes(record))
    assert "dask.span.task_states.no_worker" in span_keys
    group = group_record(durations=(("compute", 1.0), ("disk-read", 0.5), ("disk-write", 0.25)))
    decoded = decoded_span(traces.group_span(group, limits=RecordLimits()))
    group_keys = {kv.key for kv in decoded.attributes}
    assert {"dask.task_group.duration.disk_read", "dask.task_group.duration.disk_write"} <= (
        group_keys
    )
    bad = {key for key in span_keys | group_keys if not KEY.fullmatch(key)}
    assert not bad, bad


def test_the_key_mapping_is_documented() -> None:
    text = DOC.read_text()
    for dask_name, part in [("no-worker", "no_worker"), ("disk-read", "disk_read")]:
        assert f"`{dask_name}` → `{part}`" in text
