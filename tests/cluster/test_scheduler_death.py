"""A real ``dask scheduler`` process that dies, with rotel between it and the sink.

SIGTERM is a graceful shutdown: every open span is flushed (exported unfinished, with
``dask.span.done = false``) within ``shutdown-timeout``. SIGKILL loses what the
scheduler still held; what had finished before (sub-spans exported as they end) is at
the collector already. docs/telemetry.md ("When the scheduler dies") says exactly this.

The shutdown path is timed by the scheduler's own log, from "Received signal SIGTERM"
to "End scheduler": otel-spans' flush, bounded by ``shutdown-timeout``, runs between
the two, and Dask's own closing of comms and servers around it takes tens of ms. The
process's exit after "End scheduler" (Python finalising the interpreter, mostly its
last garbage collection) is not timed: a ``dask scheduler`` without the preload spends
as long there, from half a second on a quiet machine to several seconds under load.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from distributed import Client, Future
from distributed import span as dask_span

import otel_spans
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.ports import free_port, wait_until
from tests.servers.rotel import RotelCollector
from tests.support.tasks import wait_for

SHUTDOWN_TIMEOUT_S = 5
#: Dask's own part of the shutdown path, around otel-spans' flush: cancelling its
#: tasks, closing comms and stopping its servers (tens of ms seen, a few hundred under
#: CPU load; one second is the margin).
DASK_CLOSE_S = 1.0
#: How long the test waits for the process to exit: finalising the interpreter after
#: "End scheduler" is not part of the shutdown path, only bounded so that a hang fails.
EXIT_WAIT_S = 60
_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - ")


def logged_at(log: str, message: str) -> datetime:
    """When the scheduler logged the first line containing ``message``."""
    for line in log.splitlines():
        match = _LOG_TIME.match(line)
        if match and message in line:
            return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
    raise AssertionError(f"the scheduler never logged {message!r}:\n{log}")


@contextmanager
def dask_processes(tmp_path: Path, endpoint: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A ``dask scheduler`` with the otel_spans preload and one ``dask worker``."""
    config = {
        "distributed": {"scheduler": {"preload": ["otel_spans"]}},
        "otel-spans": {
            "endpoint": endpoint,
            "shutdown-timeout": f"{SHUTDOWN_TIMEOUT_S}s",
            "traces": {"linger": "100ms", "poll-interval": "50ms"},
            "metrics": {"interval": "500ms"},
        },
    }
    (tmp_path / "dask.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "DASK_CONFIG": str(tmp_path)}
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = (tmp_path / "scheduler.log").open("wb")
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", str(port), "--dashboard-address", ":0"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    worker = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "2",
         "--no-nanny", "--host", "127.0.0.1", "--dashboard-address", ":0"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield scheduler, address
    finally:
        for proc in (worker, scheduler):
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
        log.close()


def names(receiver: OtlpReceiver) -> dict[str, bool]:
    """Dask spans received: name -> dask.span.done."""
    return {
        s.name: bool(s.attributes.get("dask.span.done"))
        for s in receiver.spans()
        if "dask.span.id" in s.attributes
    }


def run_until_stage_two_is_running(client: Client, receiver: OtlpReceiver, gate: str) -> Future:
    """A workflow whose first stage finished (and reached the sink) and whose second
    stage is running when the scheduler dies."""
    client.wait_for_workers(1, timeout=60)
    with otel_spans.span("doomed"):
        with dask_span("stage-1"):
            assert client.gather(client.map(abs, [-1, -2], key=["one-0", "one-1"])) == [1, 2]
        with dask_span("stage-2"):
            running = client.submit(wait_for, gate, key="two-0", pure=False)
    wait_until(
        lambda: "stage-1" in names(receiver), timeout=30, message=lambda: str(names(receiver))
    )
    wait_until(
        lambda: (
            client.run_on_scheduler(
                lambda dask_scheduler: dask_scheduler.tasks["two-0"].state  # type: ignore[no-any-return]
            )
            == "processing"
        ),
        timeout=30,
    )
    return running


@pytest.mark.timeout(180)
def test_sigterm_flushes_every_open_span(
    rotel: RotelCollector, otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    """Catches: open spans dropped (or exported as done) at shutdown; a shutdown that
    waits for the running task, or for the SDK's own export timeout (30 s), instead of
    at most ``shutdown-timeout``."""
    gate = f"gate-{uuid.uuid4()}"
    with (
        dask_processes(tmp_path, rotel.grpc_endpoint) as (scheduler, address),
        Client(address, timeout=60) as client,
    ):
        running = run_until_stage_two_is_running(client, otlp_receiver, gate)
        assert running.status == "pending"
        assert names(otlp_receiver) == {"stage-1": True}  # the root is still open
        scheduler.send_signal(signal.SIGTERM)
        scheduler.wait(EXIT_WAIT_S)
    wait_until(lambda: {"doomed", "stage-2"} <= set(names(otlp_receiver)), timeout=30)
    got = names(otlp_receiver)
    assert got == {"stage-1": True, "stage-2": False, "doomed": False}, got
    log = (tmp_path / "scheduler.log").read_text(errors="replace")
    shutdown = logged_at(log, "End scheduler") - logged_at(log, "Received signal SIGTERM")
    assert shutdown.total_seconds() <= SHUTDOWN_TIMEOUT_S + DASK_CLOSE_S, shutdown


@pytest.mark.timeout(180)
def test_sigkill_keeps_what_finished_before(
    rotel: RotelCollector, otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    gate = f"gate-{uuid.uuid4()}"
    with (
        dask_processes(tmp_path, rotel.grpc_endpoint) as (scheduler, address),
        Client(address, timeout=60) as client,
    ):
        running = run_until_stage_two_is_running(client, otlp_receiver, gate)
        assert running.status == "pending"
        # the workflow-started record left at once: the trace id is not lost either
        wait_until(
            lambda: any(r.event_name == "dask.span.started" for r in otlp_receiver.logs()),
            timeout=30,
        )
        scheduler.send_signal(signal.SIGKILL)
        scheduler.wait(30)
        client.close(timeout=5)
    # Stopping the collector makes it flush what it holds: after that, nothing more of
    # this workflow can arrive. Whatever the scheduler still held is gone: the root and
    # the running stage.
    rotel.stop()
    assert names(otlp_receiver) == {"stage-1": True}
