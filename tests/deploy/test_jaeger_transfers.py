"""The demo-shaped workflow spread over two workers, with transfers, in Jaeger v2.

tests/deploy/test_backends.py runs the workflow on one worker: no task fetches data, so
every task span starts at its compute. Here load-i and fit-i run on worker i % 2
(``tests/support/workload.py``): each fit first fetches the other worker's loads, so
its span starts at a ``transfer`` phase, before its group's first compute, and the two
workers each shift what they report by a ``scheduler_delay`` of their own. Jaeger's
clock-skew adjuster (cmd/query/app/querysvc/v2/adjuster/clockskew.go) warns on every
child that starts before or ends after its parent when the spans' resources name no
host (otel-spans' name none): the trace must come back with no warning at all.

Exported straight to Jaeger (the collector's routing is test_backends.py's subject).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.servers.backends import backend_binary
from tests.servers.jaeger import JaegerServer
from tests.servers.jaeger_demo import summary
from tests.servers.ports import wait_until
from tests.support import workload

#: How long Jaeger may take to show what was sent, on a busy 2-core machine.
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def spread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], str]]:
    """The workflow's trace as Jaeger's trace view reads it, and its trace id."""
    with JaegerServer(backend_binary("jaeger")) as jaeger:
        files = tmp_path_factory.mktemp("otel-spans-files")
        ran = workload.run_on_a_cluster(f"http://{jaeger.otlp_grpc_address}", files, workers=2)

        def whole() -> dict[str, Any] | None:
            trace = jaeger.trace(ran.trace_id)
            return trace if trace and len(trace["spans"]) >= workload.SPREAD_SPAN_COUNT else None

        trace = wait_until(
            whole,
            timeout=DEADLINE_S,
            interval=0.5,
            message=lambda: f"Jaeger holds {jaeger.trace(ran.trace_id)!r:.2000}",
        )
        yield trace, ran.trace_id


def tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span["tags"]}


def started_by_task_code(span: dict[str, Any]) -> bool:
    return bool(tags(span).get("otel.scope.name") == workload.TASK_CODE_SCOPE)


def parent_of(span: dict[str, Any]) -> str | None:
    refs = [r["spanID"] for r in span.get("references") or [] if r["refType"] == "CHILD_OF"]
    return refs[0] if refs else None


def test_the_spread_workflow_has_no_warnings_in_jaeger(
    spread: tuple[dict[str, Any], str],
) -> None:
    trace, trace_id = spread
    assert trace["traceID"] == trace_id
    assert not trace.get("warnings"), trace["warnings"]
    spans = trace["spans"]
    assert len(spans) == workload.SPREAD_SPAN_COUNT
    by_id = {s["spanID"]: s for s in spans}
    assert all(parent_of(s) in by_id for s in spans if parent_of(s) is not None)
    warned = [(s["operationName"], s["warnings"]) for s in spans if s.get("warnings")]
    assert warned == []
    shown = summary(trace)
    assert (shown["spans"], shown["depth"]) == (workload.SPREAD_SPAN_COUNT, workload.TREE_DEPTH)
    assert (shown["errors"], shown["links"]) == (workload.ERROR_SPANS, 1)  # fit → load
    assert not shown["trace warnings"] and shown["spans with warnings"] == 0


def test_each_fit_starts_at_its_transfer_inside_its_group(
    spread: tuple[dict[str, Any], str],
) -> None:
    trace, _ = spread
    spans = trace["spans"]
    by_id = {s["spanID"]: s for s in spans}
    fits = [
        s for s in spans if tags(s).get("dask.task.prefix") == "fit" and "dask.task.key" in tags(s)
    ]
    assert sorted(tags(s)["dask.task.key"] for s in fits) == [
        f"fit-{i}" for i in range(workload.FITS)
    ]
    workers = {tags(s)["dask.worker.address"] for s in fits}
    assert len(workers) == 2  # one fit on each worker
    transfers = [s for s in spans if s["operationName"] == "transfer"]
    assert len(transfers) == workload.TRANSFERS
    for task in fits:
        children = [s for s in spans if parent_of(s) == task["spanID"]]
        phases = sorted(
            (s for s in children if not started_by_task_code(s)), key=lambda s: s["startTime"]
        )
        assert [p["operationName"] for p in phases] == ["transfer", "compute"]
        (transfer, _) = phases
        # The loads came from the other worker.
        assert tags(transfer)["dask.phase.source"] in workers - {tags(task)["dask.worker.address"]}
        assert task["startTime"] == transfer["startTime"]  # a task span starts at its first phase
        group = by_id[parent_of(task) or ""]
        assert group["operationName"] == "fit" and "dask.task.key" not in tags(group)
        assert group["startTime"] <= transfer["startTime"]  # not at the group's first compute
