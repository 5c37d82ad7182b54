"""``dask scheduler --preload otel_spans``: the enable path of a deployed cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from distributed import Client, span

from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.ports import free_port, wait_for_port


@contextmanager
def process(args: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_dask_scheduler_cli_preload_with_otel_env(otlp_receiver: OtlpReceiver) -> None:
    port = free_port()
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver.http_endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "cli-scheduler",
        "DASK_OTEL_SPANS__TRACES__LINGER": "100ms",
    }
    address = f"tcp://127.0.0.1:{port}"
    scheduler_args = [
        sys.executable,
        "-m",
        "dask",
        "scheduler",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    scheduler_args += ["--dashboard-address", ":0", "--preload", "otel_spans"]
    worker_args = [
        sys.executable,
        "-m",
        "dask",
        "worker",
        address,
        "--nthreads",
        "1",
        "--host",
        "127.0.0.1",
    ]
    worker_args += ["--dashboard-address", ":0"]
    with process(scheduler_args, env) as scheduler:
        wait_for_port("127.0.0.1", port, timeout=30)
        with process(worker_args, env), Client(address, timeout=30) as client:
            client.wait_for_workers(1, timeout=30)
            with span("from the cli"):
                assert client.submit(sum, [1, 2]).result() == 3
            (got,) = otlp_receiver.wait_for_spans(lambda s: s.name == "from the cli", timeout=30)
        assert scheduler.poll() is None
    assert got.resource["service.name"] == "cli-scheduler"
    assert got.transport == "http"


def test_dask_scheduler_cli_refuses_to_start_with_bad_config() -> None:
    port = free_port()
    env = {**os.environ, "DASK_OTEL_SPANS__PROTOCOL": "udp"}
    args = [sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", str(port)]
    args += ["--dashboard-address", ":0", "--preload", "otel_spans"]
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "otel-spans.protocol: invalid value 'udp'; expected grpc or http/protobuf" in (
        result.stdout + result.stderr
    )
