"""The real backends the project builds itself (``tests/backends/``), found or built.

Each backend is a Go module pinned by its ``go.mod`` and ``go.sum`` under
``tests/backends/NAME``; ``tests/backends/build NAME`` builds it into a cache keyed by
those files and prints the binary's path, reusing a build of the same pins. ``./run
test`` builds them all before pytest starts, so a test only asks for the path. Outside
CI a backend that cannot be built skips the test that needs it, with the reason; in CI
(``CI=true``) it fails it (:mod:`tests.support.requirements`).
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from tests.support.requirements import unavailable

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "backends" / "build"
#: Seconds one build may take: a first build of Jaeger or Prometheus on 2 busy cores
#: takes several minutes (docs/development.md has the figures); a cached one, none.
BUILD_TIMEOUT = 1800

#: What each backend is, for skip and failure messages.
DESCRIPTIONS = {
    "otelcol": "an OpenTelemetry Collector with the core components deploy/ uses",
    "jaeger": "Jaeger v2 (all-in-one, in-memory storage)",
    "prometheus": "Prometheus 3 (with its native OTLP receiver)",
    "victorialogs": "VictoriaLogs (an OTLP logs store)",
}


@functools.cache
def backend_binary(name: str) -> Path:
    """The path of backend *name*'s binary, built if needed; or skip/fail the test."""
    what = f"{name} ({DESCRIPTIONS[name]})"
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT), name],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
            env={**os.environ, "GOFLAGS": ""},
        )
    except subprocess.TimeoutExpired:
        unavailable(what, f"tests/backends/build {name} took over {BUILD_TIMEOUT} s")
    except FileNotFoundError as exc:
        unavailable(what, f"cannot run tests/backends/build: {exc}")
    lines = proc.stdout.split()
    if proc.returncode != 0 or len(lines) != 2 or lines[0] != name:
        unavailable(
            what, f"tests/backends/build {name} exited {proc.returncode}: {proc.stderr[-2000:]}"
        )
    binary = Path(lines[1])
    if not os.access(binary, os.X_OK):
        unavailable(what, f"tests/backends/build printed {binary}, which is not executable")
    return binary
