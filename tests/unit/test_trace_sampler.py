"""``OTEL_TRACES_SAMPLER``: one sampling decision per trace, on the scheduler and workers.

The scheduler decides for a workflow's Dask spans when it first sees them
(``export_inputs.track_of``); a worker derives the flags of a task's span
(``task_trace.task_span_context``), and its TracerProvider's sampler decides for what
task code starts under it. For every sampler the three must agree on every trace.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.sampling import Decision, TraceIdRatioBased

from otel_spans import ids, semconv
from otel_spans.config import Settings
from otel_spans.sampler import SAMPLERS, TraceSampler
from otel_spans.scheduler import export_inputs
from otel_spans.scheduler.callers import Caller
from otel_spans.task_trace import task_context, task_span_context
from otel_spans.traceparent import format_traceparent

RATIO = 0.3
#: (caller flags, link): no caller; a sampled caller; an unsampled one; a linked one.
CALLERS: list[tuple[int | None, bool]] = [(None, False), (1, False), (0, False), (0, True)]


class Callers:
    """What ``track_of`` asks of the scheduler's caller contexts."""

    def __init__(self, caller: Caller | None):
        self.caller = caller

    def get(self, uuid: str) -> Caller | None:
        return self.caller

    def origin(self, root_uuid: str) -> None:
        return None


def settings_with(sampler: TraceSampler) -> Settings:
    settings = Settings.from_config(environ={})
    return replace(settings, traces=replace(settings.traces, sampler=sampler))


def decisions(
    settings: Settings, rng: random.Random, flags: int | None, link: bool
) -> tuple[int, bool, bool, bool]:
    """(trace id, the scheduler's, the task span's and the worker SDK's decision)."""
    root = str(uuid.UUID(int=rng.getrandbits(128)))
    span: Any = SimpleNamespace(id=root, name=("work",))
    annotations: dict[str, Any] = {"span": {"name": ("work",), "ids": (root,)}}
    caller = None
    if flags is not None:
        caller_trace, caller_span = rng.getrandbits(128) or 1, rng.getrandbits(64) or 1
        caller = Caller(caller_trace, caller_span, link, flags)
        text = format_traceparent(caller_trace, caller_span, sampled=bool(flags))
        annotations[semconv.ANNOTATION] = {"traceparent": text, "link": link}
    sampler = settings.traces.sampler
    identity = export_inputs.track_of(span, span, settings, Callers(caller))  # type: ignore[arg-type]
    sc = task_span_context("x-1", annotations, root, sampler)
    assert sc is not None and sc.trace_id == identity.trace_id
    child = sampler.sdk_sampler().should_sample(task_context(sc), sc.trace_id, "child")
    return (
        identity.trace_id,
        identity.sampled,
        sc.trace_flags.sampled,
        child.decision == Decision.RECORD_AND_SAMPLE,
    )


@pytest.mark.parametrize("name", SAMPLERS)
@pytest.mark.parametrize(("flags", "link"), CALLERS)
def test_scheduler_task_span_and_task_code_make_one_decision(
    name: str, flags: int | None, link: bool
) -> None:
    sampler = TraceSampler(name, RATIO)  # type: ignore[arg-type]
    rng = random.Random(f"{name}{flags}{link}")
    settings = settings_with(sampler)
    kept = 0
    for _ in range(300):
        trace_id, scheduler, task, task_code = decisions(settings, rng, flags, link)
        assert scheduler == task == task_code, (name, flags, link, hex(trace_id))
        assert scheduler == sampler.sampled(trace_id, None if flags is None or link else flags)
        kept += scheduler
    # what each sampler designs: all, none, a parent's flag, or about RATIO of the traces
    root_name = name.removeprefix("parentbased_")
    if sampler.parent_based and flags is not None and not link:
        assert kept == 300 * flags
    elif root_name == "always_on":
        assert kept == 300
    elif root_name == "always_off":
        assert kept == 0
    else:
        assert 0.2 * 300 < kept < 0.4 * 300


def test_the_ratio_is_the_sdks_rule_on_the_trace_id() -> None:
    """Deterministic on the trace id's lower 64 bits, bound for bound the SDK's."""
    rng = random.Random(7)
    for ratio in (0.0, 0.001, 0.25, 0.5, 0.999, 1.0):
        sdk = TraceIdRatioBased(ratio)
        ours = TraceSampler("traceidratio", ratio)
        for _ in range(2000):
            trace_id = rng.getrandbits(128)
            expected = sdk.should_sample(None, trace_id, "s").decision.is_sampled()
            assert ours.sampled(trace_id) is expected
        # the boundary itself
        bound = sdk.bound
        if 0 < bound < 1 << 64:
            assert ours.sampled(bound - 1) and not ours.sampled(bound)


def test_parent_based_samplers_follow_a_joined_callers_flag_only() -> None:
    off = TraceSampler("parentbased_always_off")
    assert off.sampled(5, parent_flags=1) and not off.sampled(5, parent_flags=0)
    assert not off.sampled(5)  # a root: the root sampler decides
    assert not TraceSampler("always_off").sampled(5, parent_flags=1)  # not parent-based
    assert TraceSampler("always_on").sampled(5, parent_flags=0)


def test_the_workers_provider_gets_the_same_sampler_never_the_sdks_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK reads OTEL_TRACES_SAMPLER when a TracerProvider gets no sampler: the
    worker's provider is always given the resolved one."""
    from opentelemetry.sdk.trace import TracerProvider

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    ours = TraceSampler("parentbased_traceidratio", 0.5).sdk_sampler()
    provider = TracerProvider(sampler=ours)
    assert provider.sampler is ours
    assert "TraceIdRatioBased{0.5}" in ours.get_description()
    trace_id = ids.workflow_trace_id("root")
    sc = trace.SpanContext(trace_id, 1, True, trace.TraceFlags(1))
    parent = trace.set_span_in_context(trace.NonRecordingSpan(sc))
    assert ours.should_sample(parent, trace_id, "c").decision.is_sampled()
