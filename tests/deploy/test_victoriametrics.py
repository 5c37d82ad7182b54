"""A real OTLP metrics backend: the scheduler pushes its metrics over OTLP/HTTP to
VictoriaMetrics, and PromQL over its API returns the values the workload was designed
to produce, under the names the dashboards and alerts query.

The workload is a chain of TASKS tasks of one prefix inside one Dask span, each
sleeping SLEEP seconds, on 2 threads. The design gives the expected values: exactly
TASKS tasks finished and TASKS durations; worker time and compute time at least
TASKS × SLEEP and at most OVERHEAD more per task; the span's cost (a price is set, so
the cost series are pushed too) that busy time at PRICE; and, since a chain runs one
task at a time, the other thread idle for at least as long as the chain ran.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from distributed import span

from otel_spans import semconv
from tests.servers.victoriametrics import VictoriaMetrics
from tests.support.cluster import await_until, cluster_test, traced_cluster
from tests.support.metric_names import expected_metric_names, otlp_label_name

TASKS = 12
#: Seconds each task sleeps.
SLEEP = 0.2
#: What a sleeping task's worker time may exceed its sleep by, per task: the sleep
#: overshooting, the GIL taken back after it (in-process workers), the executor's
#: hand-off and deserialising its argument.
OVERHEAD = 0.1
#: Per thread-hour: 3.6 makes one thread-second cost 0.001.
PRICE = 3.6
WORKFLOW = "vm-workflow"
BUSY_MIN, BUSY_MAX = TASKS * SLEEP, TASKS * (SLEEP + OVERHEAD)


def nap(seconds: float, previous: float | None) -> float:
    time.sleep(seconds)
    return seconds


@pytest.fixture(scope="module")
def victoria() -> Iterator[VictoriaMetrics]:
    with VictoriaMetrics() as server:
        yield server


def value(result: list[dict[str, Any]]) -> float | None:
    return float(result[0]["value"][1]) if len(result) == 1 else None


def cost_seconds(cost: float) -> float:
    """A cost back in thread-seconds."""
    return cost / PRICE * 3600


@cluster_test(timeout=120)
async def test_pushed_metrics_are_queryable_with_the_values_of_the_workload(
    victoria: VictoriaMetrics,
) -> None:
    """Catches: tasks counted per transition or per export (not once); worker time or
    compute time lost or counted twice; a span's cost taken from the thread time offered
    while it ran (twice its busy time here: the chain leaves one thread idle) rather
    than from its tasks' time, or at a wrong price; cost series that never reach a
    backend, or reach it under names the dashboards do not query."""
    config = {
        "otel-spans.protocol": "http/protobuf",
        "otel-spans.metrics.endpoint": victoria.otlp_metrics_endpoint,
        "otel-spans.metrics.interval": "300ms",
        "otel-spans.metrics.cpu-hour-price": PRICE,
        "otel-spans.traces.exporter": "none",
        "otel-spans.logs.exporter": "none",
    }
    name = otlp_label_name(semconv.DASK_SPAN_NAME)
    activity = otlp_label_name(semconv.ATTR_ACTIVITY)
    share = otlp_label_name(semconv.ATTR_COST_SHARE)

    def query(promql: str) -> float | None:
        victoria.flush()
        return value(victoria.query(promql))

    async with traced_cluster(config) as (client, _, _):
        with span(WORKFLOW):
            previous = None
            for i in range(TASKS):
                previous = client.submit(nap, SLEEP, previous, key=f"vm-nap-{i}")
            assert await previous == SLEEP

        state = otlp_label_name(semconv.DASK_TASK_STATE)
        prefix = otlp_label_name(semconv.DASK_TASK_PREFIX)
        tasks = (
            f'sum(dask_span_tasks_total{{{name}="{WORKFLOW}",{state}="memory",{prefix}="vm-nap"}})'
        )
        await await_until(
            lambda: query(tasks) == TASKS, 60, lambda: f"{tasks} = {victoria.query(tasks)}"
        )
        # The busy time arrives with worker heartbeats: every task's, once the span's
        # cost covers at least the designed sleeps (each task adds at least SLEEP).
        span_cost = f'sum(dask_span_cost_total{{{name}="{WORKFLOW}"}})'
        await await_until(
            lambda: (got := query(span_cost)) is not None and cost_seconds(got) >= BUSY_MIN,
            60,
            lambda: f"{span_cost} = {victoria.query(span_cost)}",
        )
        execute = (
            f"sum(dask_span_execute_time_seconds_total"
            f'{{{name}="{WORKFLOW}",{activity}!="{semconv.IDLE_ACTIVITY}"}})'
        )
        durations = f'dask_task_duration_seconds_count{{{name}="{WORKFLOW}"}}'
        compute = f'dask_task_duration_seconds_sum{{{name}="{WORKFLOW}"}}'
        workflows = f'dask_cluster_cost_total{{{share}="{semconv.COST_SHARE_WORKFLOWS}"}}'
        idle = f'dask_cluster_cost_total{{{share}="{semconv.COST_SHARE_IDLE}"}}'
        read = {q: query(q) for q in (span_cost, execute, durations, compute, workflows, idle)}

    got = {q: v for q, v in read.items() if v is not None}
    assert got.keys() == read.keys(), read
    # exact: each task counted once, in the tasks counter and in the histogram
    assert query(tasks) == TASKS
    assert got[durations] == TASKS
    # the workers' time and the scheduler's compute time of the designed sleeps
    assert BUSY_MIN <= got[execute] <= BUSY_MAX, got
    assert BUSY_MIN <= got[compute] <= BUSY_MAX, got
    # the span pays for that busy time at the price, and so does the cluster's share
    # of workflows (this was the only one)
    assert BUSY_MIN <= cost_seconds(got[span_cost]) <= BUSY_MAX, got
    assert BUSY_MIN <= cost_seconds(got[workflows]) <= BUSY_MAX, got
    # one task at a time on two threads: the other thread idled for at least the chain
    assert cost_seconds(got[idle]) >= BUSY_MIN, got

    stored = {n for n in victoria.metric_names() if n.startswith(("dask_", "otel_spans_"))}
    expected = expected_metric_names()
    # The hand port of the OTLP → Prometheus translation names what a real backend stores:
    # every series stored is one the dashboards' name check knows.
    assert stored <= expected, f"stored but not predicted: {sorted(stored - expected)}"
    assert {
        "dask_span_tasks_total",
        "dask_span_execute_time_seconds_total",
        "dask_span_cost_total",
        "dask_cluster_cost_total",
        "dask_task_duration_seconds_count",
        "otel_spans_records_total",
    } <= stored
