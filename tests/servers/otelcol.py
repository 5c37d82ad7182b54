"""A real OpenTelemetry Collector (core components) for tests.

``otelcol_binary()`` is the collector the project builds from Go modules
(``tests/backends/otelcol``: the components deploy/collector-config.yaml uses, plus
``debug`` and ``nop``), or ``$OTELCOL_BINARY`` when set. Outside CI a missing collector
skips the test that needs it, with the reason; in CI (``CI=true``) it fails it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.requirements import unavailable

from .backends import backend_binary
from .ports import LOOPBACK, free_port, port_open
from .process import ServerProcess


def otelcol_binary() -> Path:
    """The path of a working core ``otelcol`` (building it if needed), or skip/fail."""
    explicit = os.environ.get("OTELCOL_BINARY")
    if explicit:
        if not os.access(explicit, os.X_OK):
            unavailable("otelcol", f"OTELCOL_BINARY={explicit} is not an executable file")
        return Path(explicit)
    return backend_binary("otelcol")


def otelcol_validate(config: Path, env: dict[str, str] | None = None) -> tuple[bool, str]:
    """``otelcol validate --config=FILE``: (valid, the collector's output)."""
    proc = subprocess.run(
        [str(otelcol_binary()), "validate", f"--config={config}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )
    return proc.returncode == 0, proc.stdout + proc.stderr


class OtelcolServer(ServerProcess):
    """``otelcol --config=FILE`` on loopback ports chosen here (env overrides)."""

    def __init__(self, config: Path, env: dict[str, str] | None = None) -> None:
        self.config = config
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.metrics_port = free_port()
        self.env = {
            "OTELCOL_OTLP_GRPC_ENDPOINT": f"{LOOPBACK}:{self.grpc_port}",
            "OTELCOL_OTLP_HTTP_ENDPOINT": f"{LOOPBACK}:{self.http_port}",
            "OTELCOL_METRICS_HOST": LOOPBACK,
            "OTELCOL_METRICS_PORT": str(self.metrics_port),
            **(env or {}),
        }
        self._tmpdir = Path(tempfile.mkdtemp(prefix="otelcol-"))
        self.log_path = self._tmpdir / "otelcol.log"
        self._log_fh = None
        self._proc = None

    def start(self, timeout: float = 20.0) -> OtelcolServer:
        if self._proc is not None and self._proc.poll() is None:
            return self  # already running (start() then ``with``)
        if self._log_fh is None:
            self._log_fh = open(self.log_path, "ab")  # noqa: SIM115 - closed in close()
        self._proc = subprocess.Popen(
            [str(otelcol_binary()), f"--config={self.config}"],
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
        )
        deadline = time.monotonic() + timeout
        ports = (self.grpc_port, self.http_port, self.metrics_port)
        while not all(port_open(LOOPBACK, p) for p in ports):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                log = self.log_text()
                self.close()
                raise RuntimeError(f"otelcol did not start:\n{log[-5000:]}")
            time.sleep(0.05)
        return self

    @property
    def otlp_grpc_endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.grpc_port}"

    @property
    def otlp_http_endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{LOOPBACK}:{self.metrics_port}/metrics"

    def __enter__(self) -> OtelcolServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
