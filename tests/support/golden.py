"""The golden workflows: designs whose every expected number is written in the tests.

Two forms of the same small ML pipeline (fetch → validate → three features → train →
evaluate → deploy):

* hand-scheduled :class:`~otel_spans.analysis.model.Workflow` objects with exact
  nanosecond times on three threads, for the pure analyses and the report renderers;
* :func:`golden_graph`, a Dask graph of the same shape that a real cluster runs, for the
  scheduler's own analysis and the report of a real run.
"""

from __future__ import annotations

from dataclasses import replace

from dask.delayed import delayed

from otel_spans.analysis.model import DaskSpan, Phase, TaskRun, ThreadInterval, Workflow
from tests.support.html import HOSTILE
from tests.support.tasks import step

T0 = 1_700_000_000_000_000_000
W1 = "tcp://10.0.0.1:4001"
W2 = "tcp://10.0.0.2:4002"
MS = 1_000_000


def at(ms: int) -> int:
    """Epoch nanoseconds ``ms`` milliseconds after the workflow start."""
    return T0 + ms * MS


def task(
    key: str,
    worker: str,
    thread: int,
    start_ms: int,
    end_ms: int,
    deps: tuple[str, ...] = (),
    transfers: tuple[Phase, ...] = (),
    prefix: str | None = None,
) -> TaskRun:
    return TaskRun(
        key=key,
        prefix=prefix or key.split("-")[0],
        group=key.split("-")[0] + "-abc123",
        worker=worker,
        thread=thread,
        start_ns=at(start_ms),
        end_ns=at(end_ms),
        dependencies=deps,
        transfers=transfers,
        nbytes=1000,
        span_name=("pipeline", key.split("-")[0]),
    )


def transfer(source: str, start_ms: int, end_ms: int) -> Phase:
    return Phase("transfer", at(start_ms), at(end_ms), source)


def golden_workflow() -> Workflow:
    """fetch→validate→{feature_a, feature_b, feature_c}→train→evaluate→deploy.

    W1 has threads 101 and 102, W2 has thread 201. feature_c runs on W2 and its result
    travels back to W1 for train, but arrives (2.0 s) before feature_a ends (2.5 s).
    evaluate waits 0.1 s to be scheduled; the workflow ends 0.1 s after deploy.
    """
    tasks = (
        task("fetch-0", W1, 101, 0, 1000),
        task("validate-0", W1, 101, 1000, 1500, ("fetch-0",)),
        task("feature_a-0", W1, 101, 1500, 2500, ("validate-0",)),
        task("feature_b-0", W1, 102, 1500, 2300, ("validate-0",)),
        task(
            "feature_c-0",
            W2,
            201,
            1600,
            1900,
            ("validate-0",),
            (transfer(W1, 1500, 1600),),
        ),
        task(
            "train-0",
            W1,
            101,
            2500,
            4500,
            ("feature_a-0", "feature_b-0", "feature_c-0"),
            (transfer(W2, 1900, 2000),),
        ),
        task("evaluate-0", W1, 101, 4600, 5100, ("train-0",)),
        task("deploy-0", W1, 101, 5100, 5300, ("evaluate-0",)),
    )
    return Workflow(
        name="ml-pipeline",
        start_ns=at(0),
        end_ns=at(5400),
        tasks=tasks,
        threads=(ThreadInterval(at(0), at(5400), 2), ThreadInterval(at(0), at(5400), 1)),
        activity_seconds={"thread-noncpu": 0.5, "thread-cpu": 5.5, "disk-read": 0.0},
    )


def slow_transfer_workflow() -> Workflow:
    """The golden DAG with feature_b on W2 and a 0.7 s transfer of its result to train.

    feature_b ends at 2.4 s, before feature_a (2.5 s), but its data reaches train only
    at 3.1 s, so train (and the critical path) waits for feature_b.
    """
    tasks = (
        task("fetch-0", W1, 101, 0, 1000),
        task("validate-0", W1, 101, 1000, 1500, ("fetch-0",)),
        task("feature_a-0", W1, 101, 1500, 2500, ("validate-0",)),
        task(
            "feature_b-0",
            W2,
            201,
            1600,
            2400,
            ("validate-0",),
            (transfer(W1, 1500, 1600),),
        ),
        task("feature_c-0", W1, 102, 1500, 1800, ("validate-0",)),
        task(
            "train-0",
            W1,
            101,
            3100,
            5100,
            ("feature_a-0", "feature_b-0", "feature_c-0"),
            (transfer(W2, 2400, 3100),),
        ),
        task("evaluate-0", W1, 101, 5100, 5600, ("train-0",)),
        task("deploy-0", W1, 101, 5600, 5800, ("evaluate-0",)),
    )
    return Workflow(
        name="slow-transfer",
        start_ns=at(0),
        end_ns=at(5800),
        tasks=tasks,
        threads=(ThreadInterval(at(0), at(5800), 3),),
    )


#: The golden workflow's critical path (fetch, validate, feature_a, train, evaluate,
#: deploy): feature_c's transfer arrives before feature_a ends.
GOLDEN_PATH = ("fetch-0", "validate-0", "feature_a-0", "train-0", "evaluate-0", "deploy-0")


#: The Dask spans of the hand-scheduled golden workflow.
SPANS = [
    DaskSpan(("pipeline",), at(0), at(5400)),
    DaskSpan(("pipeline", "prepare"), at(0), at(1500)),
    DaskSpan(("pipeline", "features"), at(1500), at(2500)),
    DaskSpan(("pipeline", "features", "feature_a"), at(1500), at(2500)),
    DaskSpan(("pipeline", "model"), at(2500), at(5300)),
]


# -- the same pipeline as a Dask graph, run for real --------------------------------------
#: Seconds of each feature task (the design the expected values come from).
FEATURES = {"feature_a": 1.0, "feature_b": 0.5, "feature_c": 0.2}
#: fetch, validate, train, evaluate, deploy: the steps every path goes through.
CHAIN = {"fetch": 0.3, "validate": 0.1, "train": 0.4, "evaluate": 0.1, "deploy": 0.05}


def golden_graph() -> object:
    """fetch → validate → {feature_a 1.0 s, feature_b 0.5 s, feature_c 0.2 s} → train → …

    Run on one worker with 3 threads: the features run side by side and no result has to
    travel, so the critical path runs through feature_a (0.5 s ahead of the next) unless
    a start is delayed by more than that.
    """
    fetch = delayed(step)(0.3, dask_key_name="fetch-0")
    validate = delayed(step)(0.1, fetch, dask_key_name="validate-0")
    features = [
        delayed(step)(seconds, validate, dask_key_name=f"{name}-0")
        for name, seconds in FEATURES.items()
    ]
    train = delayed(step)(0.4, *features, dask_key_name="train-0")
    evaluate = delayed(step)(0.1, train, dask_key_name="evaluate-0")
    return delayed(step)(0.05, evaluate, dask_key_name="deploy-0")


def golden_run() -> tuple[Workflow, list[DaskSpan]]:
    """The golden workflow with its tasks placed in the Dask spans of ``SPANS``."""
    workflow = golden_workflow()
    in_span = {
        "fetch-0": ("pipeline", "prepare"),
        "validate-0": ("pipeline", "prepare"),
        "feature_a-0": ("pipeline", "features", "feature_a"),
        "train-0": ("pipeline", "model"),
        "evaluate-0": ("pipeline", "model"),
        "deploy-0": ("pipeline", "model"),
    }
    tasks = tuple(
        replace(t, span_name=in_span.get(t.key, ("pipeline", "features"))) for t in workflow.tasks
    )
    return replace(workflow, tasks=tasks), SPANS


def hostile_run() -> tuple[Workflow, list[DaskSpan]]:
    """A workflow, task, group, worker and span all named ``HOSTILE``."""
    tasks = (
        TaskRun(HOSTILE, HOSTILE, HOSTILE, HOSTILE, 1, at(0), at(100), span_name=(HOSTILE,)),
        TaskRun("next", "next", "next", W1, 1, at(100), at(200), (HOSTILE,), span_name=(HOSTILE,)),
    )
    workflow = Workflow(HOSTILE, at(0), at(200), tasks, (ThreadInterval(at(0), at(200), 1),))
    return workflow, [DaskSpan((HOSTILE,), at(0), at(200))]
