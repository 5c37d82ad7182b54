"""``otel-spans report`` as a user runs it: a subprocess of the installed entry point."""

from __future__ import annotations

import subprocess
import sys


def run_report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "otel_spans", "report", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
