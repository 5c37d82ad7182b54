"""Python code run in a fresh interpreter: what a test checks of a process of its own
(modules imported, peak memory, environment read at import), not of the test run's."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping


def fresh_python(
    code: str, *, env: Mapping[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with this interpreter in a new process; it must exit 0 (its stderr
    is the failure's message). The finished process, for its stdout and stderr."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=None if env is None else dict(env),
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done
