"""Dask's Python log records as OTel log records (``otel-spans.logs.python``).

Real clusters, the loopback OTLP receiver, decoded protobufs. Expected values come from
what the test logs or makes Dask log: the message, the logger (the record's scope), the
Python level's OTel severity, and the trace and span ids the id schemes give the task
or Dask span the record is about.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import dask.config
import pytest
from distributed import Client, LocalCluster, Status
from distributed import span as dask_span

from otel_spans import ids
from otel_spans.config import ConfigError, Settings
from otel_spans.telemetry import python_logs
from otel_spans.telemetry.python_logs import severity_number
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import ReceivedLog
from tests.support.cluster import FAST, await_until, cluster_test, stats, traced_cluster
from tests.support.tasks import inc, worker_stats

pytestmark = pytest.mark.usefixtures("default_otel_config")

SCHEDULER_LOGGER = "distributed.scheduler"


def scheduler_config(receiver: OtlpReceiver, **extra: Any) -> dict[str, Any]:
    return {"otel-spans.endpoint": receiver.grpc_endpoint, **extra}


def handler_installed() -> bool:
    handlers = logging.getLogger("distributed").handlers
    return any(isinstance(h, python_logs._ProcessHandler) for h in handlers)


# -- the mapping --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("level", "number"),
    [
        (logging.DEBUG, 5),  # DEBUG
        (logging.INFO, 9),  # INFO
        (logging.WARNING, 13),  # WARN
        (logging.WARNING + 5, 14),  # WARN2: a custom level between WARNING and ERROR
        (logging.ERROR, 17),  # ERROR
        (logging.CRITICAL, 21),  # FATAL
        (logging.CRITICAL + 20, 24),  # FATAL4, the highest
        (1, 1),  # below DEBUG: TRACE
    ],
)
def test_python_levels_map_to_the_otel_severity_numbers(level: int, number: int) -> None:
    assert severity_number(level) == number


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("level", "loud", "DEBUG, INFO, WARNING, ERROR, CRITICAL or none"),
        ("level", 30, "DEBUG, INFO, WARNING, ERROR, CRITICAL or none"),
        ("loggers", "distributed", "a list of logger names"),
        ("loggers", [""], "a list of logger names"),
        ("max-per-second", -1, "an integer >= 0"),
    ],
)
def test_bad_python_log_settings_name_the_key_and_what_is_allowed(
    key: str, value: Any, allowed: str
) -> None:
    with (
        dask.config.set({f"otel-spans.logs.python.{key}": value}),
        pytest.raises(ConfigError) as raised,
    ):
        Settings.from_config()
    assert f"otel-spans.logs.python.{key}: invalid value {value!r}" in str(raised.value)
    assert allowed in str(raised.value)


# -- the scheduler -----------------------------------------------------------------------------
@cluster_test()
async def test_a_scheduler_warning_about_a_key_carries_its_workflow_and_leaves_once(
    otlp_receiver: OtlpReceiver,
) -> None:
    """Scheduler and worker preloads in one process: one handler, each record once."""
    config = scheduler_config(otlp_receiver, **{"distributed.worker.preload": ["otel_spans"]})
    async with traced_cluster(config) as (client, _scheduler, _workers):
        with dask_span("python logs") as span_id:
            assert await client.submit(inc, 1, key="logged-1") == 2
            log = logging.getLogger(SCHEDULER_LOGGER)
            log.info("an INFO record about %s stays local", "logged-1")
            log.warning("a warning about %s", "logged-1")
        (record,) = await await_until(
            lambda: [r for r in otlp_receiver.logs() if r.body == "a warning about logged-1"]
        )
        assert handler_installed()
        counters = (await stats(client))["python_logs"]
    assert not handler_installed(), "the handler left the distributed logger at close"
    assert counters == {"active": True, "errors": 0}
    assert record.scope_name == SCHEDULER_LOGGER
    assert (record.severity_number, record.severity_text) == (13, "WARNING")
    assert record.event_name == ""
    assert record.trace_id == f"{ids.workflow_trace_id(span_id):032x}"
    assert record.span_id == f"{ids.dask_span_id(span_id):016x}"
    assert record.attributes["code.function.name"] == (
        "test_a_scheduler_warning_about_a_key_carries_its_workflow_and_leaves_once"
    )
    assert record.attributes["code.file.path"] == __file__
    assert record.attributes["thread.name"] == "MainThread"
    bodies = [str(r.body) for r in otlp_receiver.logs()]
    assert bodies.count("a warning about logged-1") == 1
    assert not any("stays local" in body for body in bodies)


@cluster_test()
async def test_capture_exceptions_type_exports_the_template_and_the_exception_type(
    otlp_receiver: OtlpReceiver,
) -> None:
    config = scheduler_config(otlp_receiver, **{"otel-spans.capture.exceptions": "type"})
    async with traced_cluster(config, n_workers=0):
        try:
            raise ValueError("secret value 42")
        except ValueError:
            logging.getLogger(SCHEDULER_LOGGER).exception("failed on %s", "secret arg")
        (record,) = await await_until(
            lambda: [r for r in otlp_receiver.logs() if r.scope_name == SCHEDULER_LOGGER]
        )
    assert record.body == "failed on %s"
    assert (record.severity_number, record.severity_text) == (17, "ERROR")
    assert record.attributes["exception.type"] == "ValueError"
    assert "exception.message" not in record.attributes
    assert "exception.stacktrace" not in record.attributes
    assert (record.trace_id, record.span_id) == ("", "")  # about nothing it knows


@cluster_test()
async def test_level_none_exports_no_python_log_and_installs_no_handler(
    otlp_receiver: OtlpReceiver,
) -> None:
    config = scheduler_config(otlp_receiver, **{"otel-spans.logs.python.level": "none"})
    async with traced_cluster(config, n_workers=0) as (client, _scheduler, _workers):
        assert not handler_installed()
        logging.getLogger(SCHEDULER_LOGGER).error("not exported")
        await client.log_event("marker", {"action": "marker"})
        await await_until(
            lambda: [r for r in otlp_receiver.logs() if r.attributes.get("dask.event.topic")]
        )
        assert (await stats(client))["python_logs"] == {"active": False}
    assert not [r for r in otlp_receiver.logs() if r.body == "not exported"]


# -- workers (processes of their own, with the worker preload) ----------------------------------
def fail(x: int) -> int:
    raise RuntimeError(f"task failed on {x}")


def storm(n: int) -> tuple[float, float]:
    """Log ``n`` warnings through a Dask logger as fast as possible; when it ran."""
    log = logging.getLogger("distributed.worker")
    start = time.monotonic()
    for i in range(n):
        log.warning("storm %d", i)
    return start, time.monotonic()


def fake_memory(fraction: float, dask_worker: Any) -> None:
    """Make the worker's memory monitor read ``fraction`` of its limit (how Dask's own
    tests drive the pause without filling the machine's memory)."""
    limit = dask_worker.memory_manager.memory_limit
    dask_worker.monitor.get_process_memory = lambda: int(limit * fraction) + 1


def worker_status(dask_worker: Any) -> str:
    return str(dask_worker.status.name)


def process_config(receiver: OtlpReceiver, **extra: Any) -> dict[str, Any]:
    return {
        "distributed.scheduler.preload": ["otel_spans"],
        "distributed.worker.preload": ["otel_spans"],
        "otel-spans.endpoint": receiver.grpc_endpoint,
        **FAST,
        **extra,
    }


def local_cluster(**kwargs: Any) -> LocalCluster:
    return LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=":0",
        **kwargs,
    )


def from_worker(records: list[ReceivedLog], worker_id: str) -> list[ReceivedLog]:
    return [r for r in records if r.resource.get("service.instance.id") == worker_id]


def test_a_failing_task_logs_compute_failed_with_the_tasks_own_span(
    otlp_receiver: OtlpReceiver,
) -> None:
    with (
        dask.config.set(process_config(otlp_receiver)),
        local_cluster() as cluster,
        Client(cluster) as client,
    ):
        (worker_id,) = client.run(lambda dask_worker: dask_worker.id).values()
        with dask_span("failing") as span_id:
            future = client.submit(fail, 7, key="fail-7")
            with pytest.raises(RuntimeError, match="task failed on 7"):
                future.result()
        (record,) = otlp_receiver.wait_for_logs(
            lambda r: r.scope_name == "distributed.worker" and "Compute Failed" in str(r.body)
        )
    assert record.resource["service.instance.id"] == worker_id
    assert (record.severity_number, record.severity_text) == (17, "ERROR")
    assert "fail-7" in str(record.body) and "task failed on 7" in str(record.body)
    # logged inside the task's execution: the task's own span, as task code sees it
    assert record.trace_id == f"{ids.workflow_trace_id(span_id):032x}"
    assert record.span_id == f"{ids.task_span_id(span_id, 'fail-7'):016x}"


def test_a_worker_paused_for_memory_says_so_once_beside_dasks_event(
    otlp_receiver: OtlpReceiver,
) -> None:
    config = process_config(otlp_receiver, **{"distributed.worker.memory.monitor-interval": "20ms"})
    with (
        dask.config.set(config),
        local_cluster(memory_limit="1 GiB") as cluster,
        Client(cluster) as client,
    ):
        (worker_id,) = client.run(lambda dask_worker: dask_worker.id).values()
        (address,) = client.scheduler_info()["workers"]
        client.run(fake_memory, 0.9)
        deadline = time.monotonic() + 15
        while client.run(worker_status)[address] != Status.paused.name:
            assert time.monotonic() < deadline, "the worker did not pause"
            time.sleep(0.05)
        client.run(fake_memory, 0.1)
        while client.run(worker_status)[address] != Status.running.name:
            assert time.monotonic() < deadline, "the worker did not resume"
            time.sleep(0.05)
        otlp_receiver.wait_for_logs(lambda r: "Resuming worker" in str(r.body))
        otlp_receiver.wait_for_logs(
            lambda r: (
                r.attributes.get("dask.event.action") == "worker-status-change"
                and isinstance(r.body, dict)
                and r.body.get("status") == "running"
            ),
        )
    records = otlp_receiver.logs()
    paused = [r for r in from_worker(records, worker_id) if "Pausing worker" in str(r.body)]
    assert len(paused) == 1, [r.body for r in paused]
    (record,) = paused
    assert record.scope_name == "distributed.worker.memory"
    assert (record.severity_number, record.severity_text) == (13, "WARNING")
    assert record.body.startswith("Worker is at 90% memory usage. Pausing worker.")
    assert record.attributes["code.function.name"] == "_maybe_pause_or_unpause"
    # Dask's structured event about the same pause: exported once too, by the scheduler
    events = [
        r.body
        for r in records
        if r.attributes.get("dask.event.action") == "worker-status-change"
        and isinstance(r.body, dict)
        and r.body.get("status") == "paused"
    ]
    assert len(events) == 1, events


def test_a_log_storm_is_bounded_per_second_and_every_record_counted(
    otlp_receiver: OtlpReceiver,
) -> None:
    per_second, n = 20, 5000
    config = process_config(otlp_receiver, **{"otel-spans.logs.python.max-per-second": per_second})
    with dask.config.set(config), local_cluster() as cluster, Client(cluster) as client:
        (worker_id,) = client.run(lambda dask_worker: dask_worker.id).values()
        start, end = client.submit(storm, n, key="storm-1").result()
        windows = int(end) - int(start) + 1  # whole seconds of the monotonic clock

        def settled() -> dict[str, Any] | None:
            (stats,) = client.run(worker_stats).values()
            logs: dict[str, Any] = stats["python_logs"]
            received = from_worker(otlp_receiver.logs(), worker_id)
            done = logs["queued"] == logs["sending"] == 0
            return logs if done and logs["exported"] == len(received) else None

        deadline = time.monotonic() + 15
        while (logs := settled()) is None:
            assert time.monotonic() < deadline, "the worker's log pipeline did not settle"
            time.sleep(0.05)
    storm_records = [r for r in otlp_receiver.logs() if str(r.body).startswith("storm ")]
    others = logs["submitted"] - n  # any other warning the worker logged meanwhile
    assert logs["active"] is True and logs["errors"] == 0
    assert logs["dropped"] == logs["failed"] == logs["unsent"] == 0
    assert logs["submitted"] == logs["exported"] + logs["suppressed"]
    assert logs["submitted"] >= n
    assert per_second - others <= len(storm_records) <= per_second * windows
    assert logs["suppressed"] >= n - per_second * windows
    # the first records of each second are the ones kept, in order
    numbers = [int(str(r.body).split()[1]) for r in storm_records]
    assert numbers == sorted(numbers) and numbers[0] == 0
