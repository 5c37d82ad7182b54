"""Each diagnosis rule on designed evidence: it fires past its threshold, not before,
and the shares of one workflow never add up to more than its wall time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_spans.analysis import diagnosis as d
from otel_spans.analysis.critical_path import CriticalPath, PathStep
from otel_spans.analysis.evidence import Evidence, GroupEvidence
from otel_spans.analysis.ledger import Ledger
from otel_spans.analysis.model import TaskRun
from otel_spans.analysis.rules import RULES
from otel_spans.semconv import IDLE_ACTIVITY

S = 1_000_000_000


def step(group: str, compute: float, wait: float = 0.0, client: float = 0.0) -> PathStep:
    run = TaskRun(group, group.split("-")[0], group, "", None, 0, int(compute * S))
    return PathStep(run, 0.0, wait, client)


def path(*steps: PathStep, wall: float, tail: float = 0.0, transfer: float = 0.0) -> CriticalPath:
    compute = sum(s.compute_s for s in steps)
    return CriticalPath(
        steps=steps,
        wall_s=wall,
        length_s=compute + transfer,
        compute_s=compute,
        transfer_s=transfer,
        gap_s=sum(s.wait_s for s in steps) + tail,
        tail_s=tail,
        prefixes=(),
        groups=(),
        client_s=sum(s.client_s for s in steps),
    )


def group(
    name: str,
    tasks: int,
    compute: float,
    *,
    runs: int | None = None,
    erred: int = 0,
    slowest: float | None = None,
    typical: float | None = None,
    **durations: float,
) -> GroupEvidence:
    return GroupEvidence(
        name=name,
        prefix=name.split("-")[0],
        tasks=tasks,
        runs=tasks if runs is None else runs,
        erred=erred,
        durations={"compute": compute, **{k.replace("_", "-"): v for k, v in durations.items()}},
        slowest_s=slowest,
        slowest_key=f"('{name}', 0)" if slowest is not None else None,
        typical_s=typical,
    )


def evidence(
    p: CriticalPath,
    *groups: GroupEvidence,
    efficiency: float | None = 0.8,
    threads: int = 2,
    worker_threads: int = 1,
    activities: Mapping[str, float] | None = None,
    spans: Mapping[str, Mapping[str, float]] | None = None,
) -> Evidence:
    return Evidence(
        name="wf",
        wall_s=p.wall_s,
        path=p,
        groups=groups,
        activities=activities or {},
        span_activities=spans or {},
        efficiency=efficiency,
        peak_threads=threads,
        worker_threads=worker_threads,
    )


def ids(e: Evidence) -> list[str]:
    return [f.id for f in d.diagnose(e)]


def test_clean_workflow_has_no_finding() -> None:
    """Two 1 s tasks on two threads, nothing waiting: nothing to say."""
    e = evidence(path(step("work-1", 1.0), wall=1.0), group("work-1", 2, 2.0, slowest=1.0))
    assert d.diagnose(e) == ()


@pytest.mark.parametrize(("slowest", "fires"), [(0.31, True), (0.30, False)])
def test_straggler_past_three_times_typical(slowest: float, fires: bool) -> None:
    g = group("load-1", 10, 0.9 + slowest, slowest=slowest, typical=0.1)
    e = evidence(path(step("load-1", slowest), wall=slowest), g)
    findings = d.diagnose(e)
    assert ("straggler" in [f.id for f in findings]) is fires
    if fires:
        first = findings[0]
        assert (first.id, first.subject, first.share) == ("straggler", "load-1", 0.6774)
        assert dict(first.evidence)["ratio"] == 3.1


def test_straggler_needs_the_critical_path_and_three_tasks() -> None:
    off_path = group("other-1", 10, 2.0, slowest=1.0, typical=0.1)
    e = evidence(path(step("load-1", 1.0), wall=1.0), group("load-1", 2, 2.0), off_path)
    assert "straggler" not in ids(e)
    two = group("load-1", 2, 1.1, slowest=1.0, typical=0.1)
    assert "straggler" not in ids(evidence(path(step("load-1", 1.0), wall=1.0), two))


@pytest.mark.parametrize(("mean_ms", "fires"), [(0.9, True), (1.1, False)])
def test_tiny_tasks_below_the_scheduler_cost(mean_ms: float, fires: bool) -> None:
    tasks = 3000
    g = group("inc-1", tasks, tasks * mean_ms / 1e3, slowest=0.002)
    e = evidence(path(step("inc-1", 5.0), wall=6.0, tail=1.0), g, efficiency=0.3)
    findings = d.diagnose(e)
    assert ("tiny-tasks" in [f.id for f in findings]) is fires
    if fires:
        assert (findings[0].id, findings[0].subject, findings[0].severity) == (
            "tiny-tasks",
            "inc-1",
            "critical",
        )
        # 3000 tasks at 1/600 s: 5 s of the 6 s wall
        assert findings[0].share == pytest.approx(5 / 6, abs=1e-3)


@pytest.mark.parametrize(("tasks", "fires"), [(100, True), (99, False)])
def test_tiny_tasks_needs_a_hundred_tasks(tasks: int, fires: bool) -> None:
    """A group's step of 1 s for a few µs of compute: overhead, if the tasks are many."""
    g = group("inc-1", tasks, tasks * 1e-5, slowest=1e-4)
    e = evidence(path(step("inc-1", 1.0), wall=1.0), g, efficiency=0.3)
    assert ("tiny-tasks" in ids(e)) is fires


def test_spilling_share_is_the_disk_fraction_of_work() -> None:
    acts = {"thread-cpu": 6.0, "disk-write": 3.0, "disk-read": 1.0, IDLE_ACTIVITY: 0.0}
    spans = {"wf": {"thread-cpu": 1.0}, "wf/spill": {"disk-write": 3.0, "disk-read": 1.0}}
    e = evidence(
        path(step("x-1", 5.0), wall=5.0),
        group("x-1", 1, 5.0, slowest=5.0),
        activities=acts,
        spans=spans,
    )
    first = d.diagnose(e)[0]
    assert (first.id, first.subject, first.subject_kind) == ("spilling", "wf/spill", "span")
    assert first.share == pytest.approx(0.4)


def test_spilling_below_the_report_share_is_silent() -> None:
    acts = {"thread-cpu": 10.0, "disk-write": 0.4}
    e = evidence(path(step("x-1", 5.0), wall=5.0), group("x-1", 2, 10.0), activities=acts)
    assert "spilling" not in ids(e)


MB = 1_000_000


def held(**memory: float) -> Evidence:
    """Two stages: ``wf/load``'s group ``big-1`` held 8 MB at its peak, ``wf``'s
    ``small-1`` 1 MB; the workflow 9 MB at once. A 2 s step after a 1 s wait, on a
    3 s wall: 1 s of the wall is waiting a pause can explain."""
    big = replace(group("big-1", 4, 2.0, slowest=2.0), span="wf/load", peak_bytes=8 * MB)
    small = replace(group("small-1", 4, 0.4, slowest=0.1), span="wf", peak_bytes=1 * MB)
    e = evidence(path(step("big-1", 2.0, wait=1.0), wall=3.0), big, small, efficiency=None)
    return replace(e, peak_bytes=9 * MB, **memory)  # type: ignore[arg-type]


def finding(e: Evidence, rule: str) -> d.Finding:
    (found,) = [f for f in d.diagnose(e) if f.id == rule]
    return found


def test_memory_pressure_names_the_group_that_held_the_most() -> None:
    f = finding(held(pauses=2, pause_s=0.6), "memory-pressure")
    assert (f.subject, f.subject_kind, f.severity) == ("big-1", "group", "warning")
    assert f.share == pytest.approx(0.6 / 3.0)
    facts = dict(f.evidence)
    assert (facts["span"], facts["group_peak_bytes"], facts["peak_bytes"]) == (
        "wf/load",
        8 * MB,
        9 * MB,
    )
    assert (facts["pauses"], facts["pause_s"], facts["workers_lost"]) == (2, 0.6, 0)


def test_memory_pressure_claims_no_more_than_the_wait_left() -> None:
    """A pause longer than the wall (pauses of several workers add up): the path
    waited 1 s of the 3 s, and only that is the pauses' to explain."""
    e = held(pauses=5, pause_s=100.0)
    assert finding(e, "memory-pressure").share == pytest.approx(1 / 3, abs=1e-4)
    assert sum(f.share for f in d.diagnose(e)) <= 1.0


@pytest.mark.parametrize(("spilled_mb", "fires"), [(9.0, True), (8.99, False)])
def test_memory_pressure_on_spilling_as_much_as_the_peak(spilled_mb: float, fires: bool) -> None:
    e = held(spilled_bytes=spilled_mb * MB, unspilled_bytes=2.0 * MB)
    assert ("memory-pressure" in ids(e)) is fires
    if fires:  # no pause: nothing of the wall claimed, reported all the same
        f = finding(e, "memory-pressure")
        assert (f.subject, f.severity, f.share) == ("big-1", "info", 0.0)
        assert (dict(f.evidence)["spilled_bytes"], dict(f.evidence)["unspilled_bytes"]) == (
            9 * MB,
            2 * MB,
        )


def test_memory_pressure_on_a_lost_worker_and_silent_without_pressure() -> None:
    assert "memory-pressure" not in ids(held())
    f = finding(held(workers_lost=1), "memory-pressure")
    assert (f.subject, f.severity, dict(f.evidence)["workers_lost"]) == ("big-1", "info", 1)


def test_memory_pressure_without_group_memory_is_about_the_workflow() -> None:
    e = replace(held(pauses=1, pause_s=0.3), groups=(group("big-1", 4, 2.0, slowest=2.0),))
    f = finding(e, "memory-pressure")
    assert (f.subject, f.subject_kind, "span" in dict(f.evidence)) == ("wf", "workflow", False)


def test_spilling_names_the_group_that_held_the_most() -> None:
    """With memory evidence, spilling is about what filled the memory (``big-1`` of
    ``wf/load``), not the span whose tasks spent the disk time (``wf/spill``)."""
    acts = {"thread-cpu": 6.0, "disk-write": 3.0, "disk-read": 1.0}
    spans = {"wf/spill": {"disk-write": 3.0, "disk-read": 1.0}}
    e = replace(held(), activities=acts, span_activities=spans)
    f = finding(e, "spilling")
    assert (f.subject, f.subject_kind) == ("big-1", "group")
    assert (dict(f.evidence)["span"], dict(f.evidence)["group_peak_bytes"]) == ("wf/load", 8 * MB)


def test_data_transfer_on_the_path_and_of_worker_time() -> None:
    moved = group("sum-1", 4, 1.0, slowest=0.3, typical=0.25, transfer=3.0)
    e = evidence(path(step("sum-1", 1.0), wall=4.0, transfer=3.0), moved, efficiency=0.9)
    first = d.diagnose(e)[0]
    assert (first.id, first.subject) == ("data-transfer", "sum-1")
    assert first.share == pytest.approx(0.75)


def test_data_transfer_between_groups_on_a_group_level_path() -> None:
    """Two groups on the path, 2 s of waiting between them, 1.5 s of transfers into
    the second: those 1.5 s of the wait were its inputs moving."""
    p = path(step("make-1", 0.5), step("use-2", 0.5, wait=2.0), wall=3.0)
    e = evidence(
        p,
        group("make-1", 1, 0.5, slowest=0.5),
        group("use-2", 1, 0.5, slowest=0.5, transfer=1.5),
        efficiency=0.55,
    )
    first = d.diagnose(e)[0]
    assert (first.id, first.subject) == ("data-transfer", "use-2")
    # 1.5 s of the wait, plus transfer's 60 % of worker time over the 1 s of steps
    assert first.share == pytest.approx((1.5 + 0.6) / 3.0)


def _gil(worker_threads: int, cpu: float, noncpu: float) -> Evidence:
    spans = {"wf/py": {"thread-cpu": cpu, "thread-noncpu": noncpu}}
    acts = {"thread-cpu": cpu, "thread-noncpu": noncpu}
    return evidence(
        path(step("py-1", 2.0), wall=2.0),
        group("py-1", 4, cpu + noncpu, slowest=2.0, typical=2.0),
        worker_threads=worker_threads,
        threads=worker_threads,
        activities=acts,
        spans=spans,
        efficiency=0.95,
    )


def test_gil_contention_on_multithreaded_workers() -> None:
    first = d.diagnose(_gil(4, 2.0, 6.0))[0]
    assert (first.id, first.subject) == ("gil-contention", "wf/py")
    assert first.share == pytest.approx(0.75)


@pytest.mark.parametrize(
    ("threads", "cpu", "noncpu"),
    [
        (1, 2.0, 6.0),  # one thread: off-CPU time is not the GIL
        (4, 0.4, 7.6),  # sleeping or waiting on I/O: 0.2 of a core < 1/4
        (4, 4.1, 3.9),  # mostly on CPU
    ],
)
def test_no_gil_contention(threads: int, cpu: float, noncpu: float) -> None:
    assert "gil-contention" not in ids(_gil(threads, cpu, noncpu))


def test_client_bound_claims_the_client_time() -> None:
    p = path(step("a-1", 1.0), step("b-2", 1.0, wait=3.0, client=3.0), wall=5.0)
    e = evidence(p, group("a-1", 1, 1.0, slowest=1.0), group("b-2", 1, 1.0, slowest=1.0))
    first = d.diagnose(e)[0]
    assert (first.id, first.subject, first.share) == ("client-bound", "b-2", 0.6)


@pytest.mark.parametrize(("efficiency", "fires"), [(0.6, True), (0.59, False)])
def test_queueing_needs_busy_threads(efficiency: float, fires: bool) -> None:
    """20 tasks of 0.1 s on one thread: the group's step is 2 s, its slowest task 0.1 s."""
    g = group("sleep-1", 20, 2.0, slowest=0.1, typical=0.1)
    e = evidence(path(step("sleep-1", 2.0), wall=2.0), g, efficiency=efficiency, threads=1)
    findings = d.diagnose(e)
    assert ("queueing" in [f.id for f in findings]) is fires
    if fires:
        assert (findings[0].id, findings[0].share) == ("queueing", 0.95)


def test_underutilised_is_what_is_left_and_at_most_a_warning() -> None:
    chain = [step(f"inc-{i}", 0.2, wait=0.01) for i in range(10)]
    groups = [group(f"inc-{i}", 1, 0.2, slowest=0.2) for i in range(10)]
    e = evidence(path(*chain, wall=2.1), *groups, efficiency=0.25, threads=4)
    first = d.diagnose(e)[0]
    assert (first.id, first.severity, first.subject) == ("underutilised", "warning", "wf")
    assert first.share == pytest.approx(1.0)
    assert "underutilised" not in ids(
        evidence(path(*chain, wall=2.1), *groups, efficiency=0.5, threads=4)
    )


def test_erred_is_always_reported() -> None:
    e = evidence(
        path(step("a-1", 1.0), wall=1.0),
        group("a-1", 2, 2.0, slowest=1.0),
        group("boom-2", 1, 0.001, erred=1),
    )
    (finding,) = d.diagnose(e)
    assert (finding.id, finding.severity, finding.subject) == ("erred", "critical", "boom-2")


def test_recomputation_counts_runs_past_tasks() -> None:
    g = group("load-1", 4, 8.0, runs=8, slowest=1.0, typical=1.0)
    e = evidence(path(step("load-1", 4.0), wall=8.0, tail=4.0), g, threads=2, efficiency=0.55)
    first = d.diagnose(e)[0]
    assert (first.id, first.subject) == ("recomputation", "load-1")
    # four reruns of 1 s extended the group's step: 4 s of the 8 s wall
    assert first.share == pytest.approx(0.5)
    assert dict(first.evidence)["recomputed_runs"] == 4


def test_shares_never_add_up_past_the_wall() -> None:
    """Every rule has evidence at once: the ledger hands out the wall time once."""
    acts = {"thread-cpu": 1.0, "thread-noncpu": 3.0, "disk-write": 4.0, "disk-read": 2.0}
    g = group("x-1", 3000, 2.0, runs=3100, erred=5, slowest=1.0, typical=0.0005, transfer=5.0)
    p = path(step("x-1", 4.0), step("x-2", 2.0, wait=2.0, client=1.0), wall=8.0, transfer=1.0)
    e = evidence(
        p,
        g,
        group("x-2", 1, 2.0, slowest=2.0),
        activities=acts,
        spans={"wf": acts},
        worker_threads=4,
        efficiency=0.9,
    )
    findings = d.diagnose(e)
    assert len(findings) >= 5
    assert sum(f.share for f in findings) <= 1.0 + 1e-9
    ranks = [(d._SEVERITY_RANK[f.severity], -f.share) for f in findings]
    assert ranks == sorted(ranks)


def test_scheduler_events_and_log_carry_the_findings() -> None:
    from otel_spans.scheduler.root_analysis import diagnosis_events, diagnosis_log

    e = evidence(
        path(step("a-1", 1.0), wall=1.0),
        group("a-1", 2, 2.0, slowest=1.0),
        group("boom-2", 1, 0.001, erred=1),
    )
    findings = d.diagnose(e)
    (event,) = diagnosis_events(findings, 7)
    attrs = dict(event.attributes)
    assert (event.name, event.time_ns) == ("dask.diagnosis.finding", 7)
    assert attrs["dask.diagnosis.finding.id"] == "erred"
    assert attrs["dask.diagnosis.finding.subject"] == "boom-2"
    assert attrs["dask.diagnosis.evidence.erred_tasks"] == 1
    log = diagnosis_log(findings, "wf", 1, 2, 7)
    assert (log.event_name, log.severity_text) == ("dask.diagnosis", "WARN")
    assert dict(log.attributes)["dask.diagnosis.findings"] == ("erred",)
    assert "erred (critical" in str(log.body)
    clean_log = diagnosis_log((), "wf", 1, 2, 7)
    assert (clean_log.severity_text, clean_log.body) == (
        "INFO",
        "workflow 'wf' diagnosis: no finding",
    )


_SECONDS = st.sampled_from([0.0, 0.0005, 0.01, 0.3, 1.0, 2.5])
_ACTIVITIES = ["thread-cpu", "thread-noncpu", "disk-read", "disk-write", IDLE_ACTIVITY]


@st.composite
def any_evidence(draw: st.DrawFn) -> Evidence:
    """Evidence with every rule's inputs drawn near its thresholds."""
    names = [f"g-{i}" for i in range(draw(st.integers(0, 4)))]
    groups = []
    for name in names:
        tasks = draw(st.sampled_from([0, 1, 2, 3, 10, 99, 100, 500]))
        durations = draw(st.dictionaries(st.sampled_from(["transfer", "disk-read"]), _SECONDS))
        groups.append(
            group(
                name,
                tasks,
                draw(_SECONDS),
                runs=draw(st.sampled_from([0, tasks, tasks + 1])),
                erred=draw(st.sampled_from([0, 0, 1])),
                slowest=draw(st.none() | _SECONDS),
                typical=draw(st.none() | _SECONDS),
                **durations,
            )
        )
    on_path = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    steps = [step(n, draw(_SECONDS), draw(_SECONDS), draw(_SECONDS)) for n in on_path]
    p = path(*steps, wall=draw(st.sampled_from([0.0, 1.0, 3.0])), transfer=draw(_SECONDS))
    activity = st.dictionaries(st.sampled_from(_ACTIVITIES), _SECONDS)
    e = evidence(
        p,
        *groups,
        efficiency=draw(st.none() | st.sampled_from([0.0, 0.3, 0.5, 0.59, 0.6, 1.0])),
        threads=draw(st.integers(0, 4)),
        worker_threads=draw(st.integers(0, 4)),
        activities=draw(activity),
        spans=draw(st.dictionaries(st.sampled_from(["wf", "wf/a"]), activity, max_size=2)),
    )
    return replace(
        e,
        pauses=draw(st.integers(0, 1)),
        workers_lost=draw(st.integers(0, 1)),
        spilled_bytes=draw(st.sampled_from([0.0, 5.0, 20.0])),
        peak_bytes=draw(st.sampled_from([0, 10])),
    )


@settings(max_examples=500, deadline=None)
@given(any_evidence())
def test_the_rules_a_diagnosis_leaves_out_find_nothing(e: Evidence) -> None:
    """The diagnosis calls only the rules that may apply: each rule it leaves out finds
    nothing (and so claims nothing) in the same evidence."""
    called = d.may_apply(e)
    assert [r for r in RULES if r in called] == list(called)
    for rule in RULES:
        if rule not in called:
            assert rule(e, Ledger(e)) is None, rule.__name__
