"""A real OpenTelemetry Collector (core components) for tests.

``otelcol_binary()`` finds the collector that ``shared/tools/otelcol/build.sh`` (next to
the repository, in its parent directory) builds from Debian's packaged Go sources, and
builds it when it is missing: first ``$OTELCOL_BINARY``, then the build cache
``~/.cache/otelcol-core/otelcol``, then ``build.sh`` (a few minutes the first time; it
caches in the same place). Outside CI a missing collector skips the test that needs it,
with the reason; in CI (``CI=true``) it fails it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import NoReturn

from tests.support.requirements import unavailable

from .ports import LOOPBACK, free_port, port_open
from .process import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = next(
    (
        candidate
        for candidate in (
            ROOT.parent / "shared" / "tools" / "otelcol" / "build.sh",
            Path("/work/shared/tools/otelcol/build.sh"),  # a checkout made elsewhere
        )
        if candidate.is_file()
    ),
    ROOT.parent / "shared" / "tools" / "otelcol" / "build.sh",
)
CACHE = Path.home() / ".cache" / "otelcol-core"
#: Seconds build.sh may take (a first build is about 4 minutes on 2 cores).
BUILD_TIMEOUT = 900


def _unavailable(reason: str) -> NoReturn:
    unavailable("otelcol (a core OpenTelemetry Collector)", reason)


def otelcol_binary() -> Path:
    """The path of a working core ``otelcol`` (building it if needed), or skip/fail."""
    explicit = os.environ.get("OTELCOL_BINARY")
    candidates = [Path(explicit)] if explicit else []
    candidates.append(CACHE / "otelcol")
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    if not BUILD_SCRIPT.is_file():
        _unavailable(f"no binary and no {BUILD_SCRIPT}")
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT), str(CACHE)],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        _unavailable(f"{BUILD_SCRIPT} took over {BUILD_TIMEOUT}s")
    binary = CACHE / "otelcol"
    if proc.returncode != 0 or not binary.is_file():
        _unavailable(f"{BUILD_SCRIPT} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return binary


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
