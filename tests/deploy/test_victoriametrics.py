"""A real OTLP metrics backend: the scheduler pushes its metrics over OTLP/HTTP to
VictoriaMetrics, and PromQL over its API returns the values the workload was designed
to produce, under the names the dashboards and alerts query."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from distributed import span

from otel_spans import semconv
from tests.servers.victoriametrics import VictoriaMetrics
from tests.support.cluster import await_until, cluster_test, traced_cluster
from tests.support.metric_names import expected_metric_names, otlp_label_name
from tests.support.tasks import inc

#: The workload: TASKS tasks of one prefix inside one Dask span, all successful.
TASKS = 12
WORKFLOW = "vm-workflow"


@pytest.fixture(scope="module")
def victoria() -> Iterator[VictoriaMetrics]:
    with VictoriaMetrics() as server:
        yield server


def value(result: list[dict[str, Any]]) -> float | None:
    return float(result[0]["value"][1]) if len(result) == 1 else None


@cluster_test(timeout=120)
async def test_pushed_metrics_are_queryable_with_the_values_of_the_workload(
    victoria: VictoriaMetrics,
) -> None:
    config = {
        "otel-spans.protocol": "http/protobuf",
        "otel-spans.metrics.endpoint": victoria.otlp_metrics_endpoint,
        "otel-spans.metrics.interval": "300ms",
        "otel-spans.traces.exporter": "none",
        "otel-spans.logs.exporter": "none",
    }
    async with traced_cluster(config) as (client, _, _):
        with span(WORKFLOW):
            futures = client.map(inc, range(TASKS), key=[f"vm-inc-{i}" for i in range(TASKS)])
            assert await client.gather(futures) == list(range(1, TASKS + 1))

        tasks_metric = "dask_span_tasks_total"
        state = otlp_label_name(semconv.DASK_TASK_STATE)
        name = otlp_label_name(semconv.DASK_SPAN_NAME)
        prefix = otlp_label_name(semconv.DASK_TASK_PREFIX)
        promql = f'sum({tasks_metric}{{{name}="{WORKFLOW}",{state}="memory",{prefix}="vm-inc"}})'

        def finished_tasks() -> float | None:
            victoria.flush()
            got = value(victoria.query(promql))
            return got if got == TASKS else None

        await await_until(finished_tasks, 60, lambda: f"{promql} = {victoria.query(promql)}")

        execute = f'sum({"dask_span_execute_time_seconds_total"}{{{name}="{WORKFLOW}"}})'

        def execute_time() -> float | None:
            victoria.flush()
            return value(victoria.query(execute)) or None

        assert await await_until(execute_time, 60, f"no {execute}") > 0

    stored = {n for n in victoria.metric_names() if n.startswith(("dask_", "otel_spans_"))}
    expected = expected_metric_names()
    # The hand port of the OTLP → Prometheus translation names what a real backend stores:
    # every series stored is one the dashboards' name check knows.
    assert stored <= expected, f"stored but not predicted: {sorted(stored - expected)}"
    assert {tasks_metric, "dask_span_execute_time_seconds_total", "otel_spans_records_total"} <= (
        stored
    )
