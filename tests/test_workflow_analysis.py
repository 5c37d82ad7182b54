"""The scheduler analyses a finished workflow: a real run of the golden DAG."""

from __future__ import annotations

import time

import pytest
from dask.delayed import delayed
from distributed import span

from tests.cluster import await_until, cluster_test, traced_cluster
from tests.servers.otlp_receiver import OtlpReceiver


def step(seconds: float, *inputs: object) -> float:
    time.sleep(seconds)
    return seconds


def golden_graph() -> object:
    """fetch → validate → {feature_a 1.0 s, feature_b 0.8 s, feature_c 0.3 s} → train → …"""
    fetch = delayed(step)(0.3, dask_key_name="fetch-0")
    validate = delayed(step)(0.1, fetch, dask_key_name="validate-0")
    features = [
        delayed(step)(seconds, validate, dask_key_name=f"{name}-0")
        for name, seconds in (("feature_a", 1.0), ("feature_b", 0.8), ("feature_c", 0.3))
    ]
    train = delayed(step)(0.4, *features, dask_key_name="train-0")
    evaluate = delayed(step)(0.1, train, dask_key_name="evaluate-0")
    return delayed(step)(0.05, evaluate, dask_key_name="deploy-0")


@cluster_test(90)
async def test_root_span_carries_critical_path_and_efficiency(otlp_receiver: OtlpReceiver) -> None:
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.metrics.interval": "200ms",
    }
    async with traced_cluster(config, n_workers=3) as (client, _, _):
        with span("golden") as root_id:
            assert await client.compute(golden_graph()) == 0.05
        (root,) = await await_until(
            lambda: [
                s for s in otlp_receiver.spans() if s.attributes.get("dask.span.id") == root_id
            ]
        )
        efficiency = await await_until(
            lambda: [p for p in otlp_receiver.metrics() if p.name == "dask.workflow.efficiency"]
        )
    attrs = root.attributes
    # feature_a (1.0 s) is the slowest feature; on a loaded machine another can still
    # end last (a late start) — the path must go through whichever did.
    ends = {
        s.attributes["dask.task_group.name"]: s.end_ns
        for s in otlp_receiver.spans()
        if str(s.attributes.get("dask.task_group.name", "")).startswith("feature_")
    }
    last = max(ends, key=ends.__getitem__)
    assert attrs["dask.workflow.critical_path"] == [
        "fetch", "validate", last, "train", "evaluate", "deploy"
    ]  # fmt: skip
    length = attrs["dask.workflow.critical_path.length"]
    feature_seconds = {"feature_a": 1.0, "feature_b": 0.8, "feature_c": 0.3}[last]
    assert 0.3 + 0.1 + feature_seconds + 0.4 + 0.1 + 0.05 <= length < 2.3
    sequential = attrs["dask.workflow.sequential_time"]
    assert 3.05 <= sequential < 3.4
    wall = (root.end_ns - root.start_ns) / 1e9
    assert attrs["dask.workflow.speedup"] == pytest.approx(sequential / wall, rel=1e-3)
    # 3 threads were available for the whole wall time, minus start-up noise
    assert 0.5 * sequential / (3 * wall) < attrs["dask.workflow.efficiency"] <= 1.0
    assert attrs["dask.workflow.bottlenecks"][:2] == ["feature_a", "feature_b"]  # by compute
    nthreads = [e for e in root.events if e.name == "dask.cluster.nthreads"]
    assert nthreads and nthreads[0].attributes == {"dask.nthreads": 3}
    # the task spans carry their dependencies for offline critical paths
    (train,) = [s for s in otlp_receiver.spans() if s.attributes.get("dask.task.key") == "train-0"]
    assert sorted(train.attributes["dask.task.dependencies"]) == [
        "feature_a-0", "feature_b-0", "feature_c-0"
    ]  # fmt: skip
    # and the efficiency lands in a histogram Grafana can chart over time
    assert efficiency[-1].kind == "histogram"
    assert efficiency[-1].attributes["dask.span.root"] == "golden"
    assert efficiency[-1].value["count"] == 1
    assert efficiency[-1].value["sum"] == pytest.approx(attrs["dask.workflow.efficiency"])
