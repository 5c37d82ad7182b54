"""What the external servers the tests start (rotel, Prometheus) have in common.

Each is one subprocess whose output goes to a log file in a temp dir of its own; it is
stopped by pid (SIGTERM, then SIGKILL after a deadline) and its log is kept for the
failure report until :meth:`ServerProcess.close` removes the temp dir.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO


class ServerProcess:
    """Lifecycle shared by the subprocess servers; subclasses set the fields and start."""

    #: Seconds stop() waits after SIGTERM (and again after SIGKILL).
    stop_timeout = 10.0

    _proc: subprocess.Popen[bytes] | None
    _log_fh: IO[bytes] | None
    _tmpdir: Path
    log_path: Path

    @property
    def pid(self) -> int | None:
        """PID of the running process, None when not started or exited."""
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def launch(self, command: Sequence[str]) -> None:
        """Start *command* in a session of its own, its output appended to the log."""
        if self._log_fh is None:
            self._log_fh = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            [str(part) for part in command],
            stdin=subprocess.DEVNULL,
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, ready: Callable[[], bool], what: str, timeout: float) -> None:
        """Poll *ready* until it holds; if the process exits or *timeout* passes first,
        close (the log goes with it) and raise with the log's tail."""
        deadline = time.monotonic() + timeout
        while not ready():
            if not self.running or time.monotonic() > deadline:
                log = self.log_text()
                self.close()
                raise RuntimeError(f"{what} did not start:\n{log[-5000:]}")
            time.sleep(0.05)

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM by pid, SIGKILL after *timeout*; returns the exit code (None: not running)."""
        proc = self._proc
        if proc is None:
            return None
        wait = self.stop_timeout if timeout is None else timeout
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=wait)
        self._proc = None
        return proc.returncode

    def close(self) -> None:
        """Stop and delete the temp dir (log included)."""
        self.stop()
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None
        shutil.rmtree(self._tmpdir, ignore_errors=True)

    def log_text(self) -> str:
        """Everything the process printed so far (all runs)."""
        if self._log_fh is not None:
            self._log_fh.flush()
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def answers_ok(url: str) -> bool:
    """Whether *url* answers ``OK`` (a health endpoint) right now."""
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bytes(response.read()).strip() == b"OK"
    except OSError:
        return False
