"""Critical path, bottlenecks, stragglers and efficiency on workflows with known answers.

The golden workflow is a small ML pipeline scheduled by hand on three threads with exact
nanosecond times, so every expected number below is a ratio of integers written in the
test, not re-derived from the implementation.
"""

from __future__ import annotations

import random
import time
import tracemalloc
from dataclasses import replace
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_spans.analysis.bottlenecks import stragglers
from otel_spans.analysis.critical_path import critical_path
from otel_spans.analysis.efficiency import efficiency
from otel_spans.analysis.model import Phase, TaskRun, ThreadInterval, Workflow
from otel_spans.analysis.workflow import analyse
from tests.support.golden import (
    GOLDEN_PATH,
    MS,
    T0,
    W1,
    W2,
    at,
    golden_workflow,
    slow_transfer_workflow,
    task,
)

GOLDEN_COMPUTE_NS = (1000 + 500 + 1000 + 800 + 300 + 2000 + 500 + 200) * MS


def test_golden_critical_path() -> None:
    path = critical_path(golden_workflow())
    assert path.keys == GOLDEN_PATH
    assert path.length_s == 5.2
    assert path.compute_s == 5.2
    assert path.transfer_s == 0.0
    assert path.wall_s == 5.4
    assert path.gap_s == 0.2
    assert path.tail_s == 0.1
    assert [step.wait_s for step in path.steps] == [0.0, 0.0, 0.0, 0.0, 0.1, 0.0]
    assert [step.compute_s for step in path.steps] == [1.0, 0.5, 1.0, 2.0, 0.5, 0.2]
    # train is 2.0 of the 5.2 s path; feature_b and feature_c are not on it.
    shares = {share.name: share for share in path.prefixes}
    assert set(shares) == {"fetch", "validate", "feature_a", "train", "evaluate", "deploy"}
    assert path.prefixes[0].name == "train"
    assert shares["train"].share == 2000 / 5200
    assert shares["train"].tasks == 1
    assert sum(share.seconds for share in path.groups) == pytest.approx(5.2)


def test_golden_efficiency_and_speedup() -> None:
    eff = efficiency(golden_workflow())
    assert eff.sequential_s == eff.busy_s == 6.3
    assert eff.efficiency == GOLDEN_COMPUTE_NS / (5400 * MS * 3)
    assert eff.speedup == GOLDEN_COMPUTE_NS / (5400 * MS)
    assert eff.thread_s == pytest.approx(16.2)
    assert eff.idle_s == (5400 * MS * 3 - GOLDEN_COMPUTE_NS) / 1e9
    assert eff.peak_threads == 3
    assert eff.mean_threads == 3.0


def test_golden_bottlenecks_and_activities() -> None:
    result = analyse(golden_workflow())
    assert result.bottlenecks[0].prefix == "train"
    assert result.bottlenecks[0].share == 2000 / 6300
    assert result.bottlenecks[0].critical_share == 2000 / 5200
    by_prefix = {b.prefix: b for b in result.bottlenecks}
    assert by_prefix["feature_b"].critical_seconds == 0.0
    assert by_prefix["feature_b"].seconds == 0.8
    assert [b.prefix for b in result.critical_bottlenecks] == [
        "train",
        "feature_a",  # ties (1.0 s) by name
        "fetch",
        "evaluate",
        "validate",
        "deploy",
    ]
    assert [(a.name, a.share) for a in result.activities] == [
        ("thread-cpu", 5.5 / 6.0),
        ("thread-noncpu", 0.5 / 6.0),
        ("disk-read", 0.0),
    ]
    assert result.stragglers == ()


def test_transfer_delay_moves_critical_path_to_feature_b() -> None:
    path = critical_path(slow_transfer_workflow())
    assert path.keys == (
        "fetch-0",
        "validate-0",
        "feature_b-0",
        "train-0",
        "evaluate-0",
        "deploy-0",
    )
    # Both transfers on the path count: W1→W2 for feature_b, W2→W1 for train.
    assert [step.transfer_s for step in path.steps] == [0.0, 0.0, 0.1, 0.7, 0.0, 0.0]
    assert path.transfer_s == 0.8
    assert path.compute_s == 5.0
    assert path.length_s == 5.8 == path.wall_s
    assert path.gap_s == 0.0


def test_workers_joining_and_leaving_change_available_thread_seconds() -> None:
    workflow = replace(
        golden_workflow(),
        threads=(
            # W1 outlives the window on both sides: only 5.4 s of it count.
            ThreadInterval(at(-2000), at(7000), 2),
            # W2 joins at 1.4 s and leaves at 5.0 s.
            ThreadInterval(at(1400), at(5000), 1),
            # W3 joins after the workflow ended.
            ThreadInterval(at(6000), at(9000), 4),
        ),
    )
    eff = efficiency(workflow)
    thread_ns = 2 * 5400 * MS + 3600 * MS
    assert eff.thread_s == thread_ns / 1e9
    assert eff.efficiency == GOLDEN_COMPUTE_NS / thread_ns
    assert eff.idle_s == (thread_ns - GOLDEN_COMPUTE_NS) / 1e9
    assert eff.peak_threads == 3
    assert eff.mean_threads == thread_ns / (5400 * MS)


def test_worker_replaced_at_the_same_instant_is_not_counted_twice() -> None:
    workflow = replace(
        golden_workflow(),
        threads=(ThreadInterval(at(0), at(2000), 3), ThreadInterval(at(2000), at(5400), 3)),
    )
    assert efficiency(workflow).peak_threads == 3


def straggler_workflow() -> Workflow:
    durations = {
        "load": [100, 100, 120, 100, 500],  # median 100: the 500 ms task is 5x
        "even": [100, 100, 300, 1000],  # median 200: 1000 is 5x, 300 is 1.5x
        "pair": [10, 1000],  # too few tasks for a median
        "instant": [0, 0, 50],  # median 0: no ratio
    }
    tasks = []
    clock = 0
    for prefix, values in durations.items():
        for i, ms in enumerate(values):
            tasks.append(task(f"{prefix}-{i}", W1, 101, clock, clock + ms))
            clock += ms
    return Workflow("stragglers", at(0), at(clock), tuple(tasks))


def test_straggler_detected_with_ratio() -> None:
    found = stragglers(straggler_workflow())
    assert [(s.task.key, s.ratio, s.median_s) for s in found] == [
        # 0.8 s over the median costs more than 0.4 s over it: first.
        ("even-3", 5.0, 0.2),
        ("load-4", 5.0, 0.1),
    ]
    assert found[0].seconds == 1.0
    assert stragglers(straggler_workflow(), factor=6.0) == ()
    assert [s.task.key for s in stragglers(straggler_workflow(), factor=1.1)] == [
        "even-3",
        "load-4",
        "even-2",
        "load-2",
    ]
    # With two tasks allowed, pair's median is 505 ms and 1000 ms is 1.98x of it.
    assert {s.task.key for s in stragglers(straggler_workflow(), factor=1.9, min_tasks=2)} == {
        "pair-1",
        "even-3",
        "load-4",
    }
    with pytest.raises(ValueError, match="factor"):
        stragglers(straggler_workflow(), factor=0)


def test_empty_workflow() -> None:
    result = analyse(Workflow("empty", T0, T0))
    assert result.critical_path.steps == ()
    assert result.critical_path.length_s == 0.0
    assert result.bottlenecks == result.critical_bottlenecks == ()
    assert result.stragglers == ()
    assert result.efficiency.efficiency is None
    assert result.efficiency.speedup is None
    assert result.efficiency.idle_s is None
    assert result.activities == ()


def test_window_without_tasks_is_all_idle() -> None:
    workflow = Workflow("idle", at(0), at(2000), threads=(ThreadInterval(at(0), at(2000), 4),))
    result = analyse(workflow)
    assert result.efficiency.efficiency == 0.0
    assert result.efficiency.speedup == 0.0
    assert result.efficiency.idle_s == 8.0
    assert result.critical_path.gap_s == 2.0


def test_missing_dependencies_cycles_and_recomputed_keys() -> None:
    tasks = (
        # A dependency on a key outside the workflow is ignored.
        task("a-0", W1, 101, 0, 100, ("outside-0",)),
        # x ran twice: its first run erred with its worker; y waited for the rerun.
        replace(task("x-0", W2, 201, 100, 200, ("a-0",)), state="erred"),
        task("x-0", W1, 101, 300, 400, ("a-0",)),
        task("y-0", W1, 101, 400, 500, ("x-0",)),
        # Inconsistent input: a dependency cycle (and a self-dependency) must terminate.
        task("c1-0", W1, 102, 0, 50, ("c2-0", "c1-0")),
        task("c2-0", W1, 102, 50, 60, ("c1-0",)),
    )
    path = critical_path(Workflow("odd", at(0), at(500), tasks))
    assert path.keys == ("a-0", "x-0", "y-0")
    assert path.steps[1].task.start_ns == at(300)
    assert path.steps[1].wait_s == 0.2
    cycle = critical_path(Workflow("cycle", at(0), at(60), tasks[4:]))
    assert cycle.keys == ("c1-0", "c2-0")


def test_result_does_not_depend_on_task_order() -> None:
    workflow = golden_workflow()
    shuffled = list(workflow.tasks)
    random.Random(4).shuffle(shuffled)
    assert analyse(replace(workflow, tasks=tuple(shuffled))) == analyse(workflow)


def test_invalid_intervals_are_rejected() -> None:
    with pytest.raises(ValueError, match="task 'k' ends before it starts"):
        TaskRun("k", "k", "k", W1, None, 10, 5)
    with pytest.raises(ValueError, match="nthreads=-1"):
        ThreadInterval(0, 1, -1)
    with pytest.raises(ValueError, match="workflow"):
        Workflow("w", 10, 0)


@st.composite
def schedules(draw: st.DrawFn) -> Workflow:
    """Random consistent schedules: every input ends (and is transferred) before use."""
    n = draw(st.integers(1, 30))
    tasks: list[TaskRun] = []
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        ready = max((tasks[d].end_ns for d in deps), default=at(0))
        worker = draw(st.sampled_from([W1, W2]))
        phases = []
        for d in deps:
            if tasks[d].worker != worker:
                gap = draw(st.integers(0, 50)) * MS
                phases.append(Phase("transfer", tasks[d].end_ns, tasks[d].end_ns + gap, W1))
                ready = max(ready, tasks[d].end_ns + gap)
        start = ready + draw(st.integers(0, 100)) * MS
        end = start + draw(st.integers(0, 500)) * MS
        tasks.append(
            TaskRun(
                f"t-{i}",
                "t",
                "t-0",
                worker,
                0,
                start,
                end,
                tuple(f"t-{d}" for d in deps),
                tuple(phases),
            )
        )
    end = max(t.end_ns for t in tasks) + draw(st.integers(0, 100)) * MS
    return Workflow("random", at(0), end, tuple(tasks))


@settings(max_examples=200, deadline=None)
@given(schedules())
def test_path_is_a_dependency_chain_accounting_for_the_wall_time(workflow: Workflow) -> None:
    path = critical_path(workflow)
    tasks = [step.task for step in path.steps]
    assert tasks[-1].end_ns == max(t.end_ns for t in workflow.tasks)
    assert not set(tasks[0].dependencies) & {t.key for t in workflow.tasks}
    for before, after in pairwise(tasks):
        assert before.key in after.dependencies
    assert path.length_s + path.gap_s == pytest.approx(path.wall_s, abs=1e-9)
    assert path.length_s <= path.wall_s + 1e-9


@st.composite
def group_steps(draw: st.DrawFn) -> Workflow:
    """Group-level workflows, as the scheduler builds them: steps with no transfers
    that may overlap their dependencies, often with a submission time."""
    n = draw(st.integers(1, 8))
    steps: list[TaskRun] = []
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        start = at(draw(st.integers(0, 50)) * 10)
        end = start + draw(st.integers(0, 30)) * 10 * MS
        submitted = draw(st.none() | st.integers(0, 500).map(lambda ms: at(ms)))
        name = f"g-{draw(st.integers(0, n))}"  # a repeated name: a recomputed group
        prefix = draw(st.sampled_from(["load", "step"]))
        dependencies = tuple(steps[d].key for d in deps)
        steps.append(
            TaskRun(name, prefix, name, "", None, start, end, dependencies, submitted_ns=submitted)
        )
    end = max(t.end_ns for t in steps) + draw(st.integers(0, 100)) * MS
    return Workflow("groups", at(0), end, tuple(steps))


@settings(max_examples=300, deadline=None)
@given(group_steps())
def test_a_group_level_path_is_the_path_of_steps_with_transfers_that_carry_nothing(
    workflow: Workflow,
) -> None:
    """Steps with no transfers take a shortcut through the walk (their inputs arrive as
    their dependencies end); it gives what the general walk gives each step with a
    transfer from no worker of the workflow, ended before the workflow started."""
    nothing = (Phase("transfer", 0, 0, "tcp://elsewhere:1"),)
    general = replace(workflow, tasks=tuple(replace(t, transfers=nothing) for t in workflow.tasks))
    path, reference = critical_path(workflow), critical_path(general)
    assert path.keys == reference.keys
    assert [(s.transfer_s, s.wait_s, s.client_s) for s in path.steps] == [
        (s.transfer_s, s.wait_s, s.client_s) for s in reference.steps
    ]
    assert replace(path, steps=()) == replace(reference, steps=())


def synthetic_workflow(layers: int, width: int) -> Workflow:
    """``layers × width`` tasks on ``width`` threads of 100 workers; each task depends
    on two tasks of the previous layer, one on another worker with a transfer."""
    rng = random.Random(0)
    workers = [f"tcp://10.1.{i // 256}.{i % 256}:8786" for i in range(100)]
    ends = [0] * width
    keys_before: list[str] = []
    tasks = []
    for layer in range(layers):
        prefix = f"op{layer % 10}"
        keys = [f"{prefix}-{layer}-{j}" for j in range(width)]
        for j in range(width):
            worker = workers[j % 100]
            deps: tuple[str, ...] = ()
            phases: tuple[Phase, ...] = ()
            start = ends[j]
            if keys_before:
                other = (j * 7 + 3) % width
                deps = (keys_before[j], keys_before[other])
                arrive = max(ends[j], ends[other]) + rng.randrange(100_000)
                source = workers[other % 100]
                phases = (Phase("transfer", T0 + ends[other], T0 + arrive, source),)
                start = arrive + rng.randrange(50_000)
            duration = int(rng.lognormvariate(16, 0.5))  # ~9 ms median
            tasks.append(
                TaskRun(
                    keys[j],
                    prefix,
                    f"{prefix}-{layer // 10}",
                    worker,
                    j // 100,
                    T0 + start,
                    T0 + start + duration,
                    deps,
                    phases,
                )
            )
        ends = [t.end_ns - T0 for t in tasks[-width:]]
        keys_before = keys
    threads = tuple(ThreadInterval(T0, T0 + max(ends), width // 100) for _ in workers)
    return Workflow("synthetic", T0, T0 + max(ends), tuple(tasks), threads)


def test_a_million_tasks() -> None:
    """1,250 layers × 800 tasks, 2 dependencies and 1 transfer each.

    Measured on the 2-core development machine: building the workflow ~7.7 s (not
    timed; ~630 MB resident for the million ``TaskRun``), ``analyse`` ~1.3 s alone and
    ~4.6 s under tracemalloc, peak traced memory 46 MB on top of the workflow (mostly
    the key index). The bounds are ~10x that, for a slow CI machine, and still catch an
    accidentally quadratic step or a per-task copy of the workflow.
    """
    workflow = synthetic_workflow(1250, 800)
    assert len(workflow.tasks) == 1_000_000
    tracemalloc.start()
    try:
        began = time.perf_counter()
        result = analyse(workflow)
        elapsed = time.perf_counter() - began
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(result.critical_path.steps) == 1250
    assert result.critical_path.transfer_s > 0
    assert result.critical_path.length_s + result.critical_path.gap_s == pytest.approx(
        result.critical_path.wall_s
    )
    assert result.critical_path.steps[-1].task.end_ns == workflow.end_ns
    assert {b.prefix for b in result.bottlenecks} == {f"op{i}" for i in range(10)}
    assert 0 < (result.efficiency.efficiency or 0) <= 1
    assert result.stragglers
    assert elapsed < 45, f"analyse took {elapsed:.1f} s"
    assert peak < 500_000_000, f"peak {peak / 1e6:.0f} MB"


def test_stragglers_compare_successful_runs_of_single_tasks_only() -> None:
    """Five loads of 100 ms: an erred one that hung for 2 s is not a straggler (it
    failed for its own reasons), a successful one of 1 s is; a group-level step standing
    for 16 tasks is never compared with single runs."""
    loads = [task(f"load-{i}", "w1", 1, 0, 100) for i in range(5)]
    hung = replace(task("load-5", "w1", 1, 0, 2000), state="erred")
    slow = task("load-6", "w1", 1, 0, 1000)
    group = replace(task("load-group", "w1", 1, 0, 5000), count=16)
    workflow = Workflow("w", at(0), at(5000), tuple([*loads, hung, slow, group]))
    assert [s.task.key for s in stragglers(workflow)] == ["load-6"]


@pytest.mark.parametrize(
    ("key", "width", "expected"),
    [
        (
            "('random_sample-9f1e3b7c2a5d4e6f8a9b0c1d2e3f4a5b', 3, 4)",
            30,
            "('random_sample-9f1e3b…, 3, 4)",
        ),
        ("sum-aggregate-9f1e3b7c2a5d4e6f8a9b0c1d2e3f4a5b-7", 30, "sum-aggregate-9…0c1d2e3f4a5b-7"),
        ("inc-1", 30, "inc-1"),
    ],
)
def test_long_keys_keep_what_tells_tasks_apart(key: str, width: int, expected: str) -> None:
    from otel_spans.report.summary import readable_key

    assert readable_key(key, width) == expected
    assert len(readable_key(key, width)) <= width


def test_the_path_follows_stages_the_client_ran_one_after_another() -> None:
    """Three stages with no data between them: the client submitted each after the
    previous one's result came back (100 ms and 50 ms later). Without the submission
    times the path would be the last stage alone; with them it runs through all three,
    and the waiting splits into the client's time and scheduling."""

    def submitted(run: TaskRun, ms: int) -> TaskRun:
        return replace(run, submitted_ns=at(ms))

    stage_a = [
        submitted(task("a-0", "w1", 1, 10, 300), 0),
        submitted(task("a-1", "w2", 1, 10, 200), 0),
    ]
    # submitted 100 ms after a-0 ended; started 20 ms after that
    stage_b = [
        submitted(task("b-0", "w1", 1, 420, 600), 400),
        submitted(task("b-1", "w2", 1, 420, 500), 400),
    ]
    stage_c = [submitted(task("c-0", "w1", 1, 660, 900), 650)]
    workflow = Workflow("stages", at(0), at(950), tuple(stage_a + stage_b + stage_c))

    path = critical_path(workflow)
    assert path.keys == ("a-0", "b-0", "c-0")
    assert path.client_s == pytest.approx(0.150)  # 300 -> 400 and 600 -> 650
    assert [round(s.client_s, 3) for s in path.steps] == [0.0, 0.1, 0.05]
    # a-0 waited 10 ms for its start, b-0 20 ms after its submission, c-0 10 ms
    assert path.scheduling_s == pytest.approx(0.040)
    assert path.tail_s == pytest.approx(0.050)
    # without submission times: the last stage alone
    bare = Workflow(
        "stages", at(0), at(950), tuple(replace(t, submitted_ns=None) for t in workflow.tasks)
    )
    assert critical_path(bare).keys == ("c-0",)
