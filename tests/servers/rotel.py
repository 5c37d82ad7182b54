"""Run the real rotel OTLP collector as a subprocess, for tests.

Why a real collector: production deployments put a collector between the
library and the backend, and the interesting failures live there -- batching
delays, the collector being killed mid-run, restarts on the same ports.  rotel
(a small Rust collector shipped as a PyPI wheel) starts in ~50 ms, so tests
can afford a fresh one per test.

rotel CLI quirks this wrapper hides (rotel-agent 0.0.1-alpha10, in the rotel 0.0.1a15
wheel the test extra pins; ``tests/export/test_servers.py`` fails on any other agent version):

* Port 0 is not supported (the agent panics), so ports come from
  :func:`~tests.servers.ports.free_port`.
* Exporter endpoints need a scheme (``http://host:port``); a bare
  ``host:port`` makes the agent log "relative URL without a base" and exit.
* ``--log-file``/``--pid-file`` are only used with ``--daemon``; in the
  foreground the agent logs to stdout, which we redirect to a temp file.
* Logs are ANSI-coloured unless ``NO_COLOR`` is set.
* Default exporter retry backoff is 5 s initial / 30 s max: far too slow for
  outage tests, so shorter defaults are passed here.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sysconfig
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Literal

from .ports import LOOPBACK, free_port, port_open, wait_until
from .process import ServerProcess

__all__ = ["ROTEL_AGENT_VERSION", "RotelCollector", "rotel_binary"]

#: The agent version the quirks above were written for.
ROTEL_AGENT_VERSION = "0.0.1-alpha10"


def rotel_binary() -> str:
    """Path of the ``rotel-agent`` executable shipped in the ``rotel`` wheel."""
    spec = importlib.util.find_spec("rotel")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the 'rotel' package is not installed (pip install rotel)")
    path = Path(next(iter(spec.submodule_search_locations))) / "rotel-agent"
    if not path.is_file():
        raise FileNotFoundError(f"rotel-agent binary missing at {path}")
    return str(path)


class RotelCollector(ServerProcess):
    """A rotel collector on 127.0.0.1 forwarding all signals over OTLP.

    Receives OTLP on :attr:`grpc_endpoint` and :attr:`http_endpoint` and
    exports traces, metrics and logs to *exporter_endpoint* (typically an
    :class:`~tests.servers.otlp_receiver.OtlpReceiver`'s ``grpc_endpoint``).

    Lifecycle: :meth:`start` / :meth:`stop` (graceful, restartable),
    :meth:`kill` (SIGKILL, to simulate a crash), :meth:`restart` (same
    ports, so clients reconnect to the same address), :meth:`close` (stop and
    delete the temp dir holding the log).  The log survives restarts and is
    available through :meth:`log_text` for failure diagnostics.
    """

    stop_timeout = 5.0

    def __init__(
        self,
        exporter_endpoint: str,
        *,
        exporter_protocol: Literal["grpc", "http"] = "grpc",
        batch_timeout: str = "50ms",
        retry_initial_backoff: str = "100ms",
        retry_max_backoff: str = "1s",
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 15.0,
        binary: str | None = None,
    ) -> None:
        if "://" not in exporter_endpoint:
            raise ValueError(
                f"exporter_endpoint needs a scheme (http://host:port), got {exporter_endpoint!r}"
            )
        self.exporter_endpoint = exporter_endpoint
        self.exporter_protocol = exporter_protocol
        self.batch_timeout = batch_timeout
        self.retry_initial_backoff = retry_initial_backoff
        self.retry_max_backoff = retry_max_backoff
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self.binary = binary or rotel_binary()
        #: Ports are chosen once so :meth:`restart` reuses them.
        self.grpc_port = free_port()
        self.http_port = free_port()
        self._env = dict(env) if env is not None else None
        self._tmpdir = Path(tempfile.mkdtemp(prefix="rotel-test-"))
        #: Combined stdout/stderr of every run of the agent, appended.
        self.log_path = self._tmpdir / "rotel.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_fh: IO[bytes] | None = None

    # -- addresses ---------------------------------------------------------

    @property
    def grpc_endpoint(self) -> str:
        """OTLP/gRPC endpoint URL, for ``OTLP*Exporter(endpoint=...)``."""
        return f"http://{LOOPBACK}:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        """OTLP/HTTP base URL; append ``/v1/traces`` etc. per signal."""
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def command(self) -> list[str]:
        """The full command line the agent is started with."""
        return [
            self.binary,
            "start",
            "--otlp-grpc-endpoint",
            f"{LOOPBACK}:{self.grpc_port}",
            "--otlp-http-endpoint",
            f"{LOOPBACK}:{self.http_port}",
            "--exporter",
            "otlp",
            "--otlp-exporter-endpoint",
            self.exporter_endpoint,
            "--otlp-exporter-protocol",
            self.exporter_protocol,
            "--batch-timeout",
            self.batch_timeout,
            "--otlp-exporter-retry-initial-backoff",
            self.retry_initial_backoff,
            "--otlp-exporter-retry-max-backoff",
            self.retry_max_backoff,
            # Only honoured with --daemon, but keep the defaults in /tmp
            # from being shared between concurrent test runs.
            "--pid-file",
            str(self._tmpdir / "rotel.pid"),
            "--log-file",
            str(self._tmpdir / "rotel-daemon.log"),
            *self.extra_args,
        ]

    def _environment(self) -> dict[str, str]:
        # ROTEL_* variables from the developer's shell would silently
        # override our flags' defaults; start from a clean slate.
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROTEL_")}
        env["NO_COLOR"] = "1"
        # The agent links the libpython of the interpreter its wheel was built for; an
        # interpreter installed outside the system (pyenv's 3.10 of ./run test-floor)
        # keeps that library in its own LIBDIR, which the loader does not search.
        libdir = sysconfig.get_config_var("LIBDIR")
        if libdir:
            paths = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
            env["LD_LIBRARY_PATH"] = os.pathsep.join([*paths, libdir])
        if self._env:
            env.update(self._env)
        return env

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> RotelCollector:
        """Start the agent and wait until both receivers accept connections."""
        if self.running:
            return self
        if self._log_fh is None:
            self._log_fh = open(self.log_path, "ab")  # noqa: SIM115 - lives across restarts
        self._log_fh.write(f"--- starting: {' '.join(self.command)}\n".encode())
        self._log_fh.flush()
        self._proc = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            env=self._environment(),
            # Own session: a Ctrl-C aimed at pytest must not kill the agent
            # behind our back; we stop it explicitly by pid.
            start_new_session=True,
        )
        try:
            for port in (self.grpc_port, self.http_port):
                self._wait_listening(port)
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_listening(self, port: int) -> None:
        """Wait for *port* to accept, failing fast if the agent dies."""

        def listening_or_dead() -> bool:
            return not self.running or port_open(LOOPBACK, port)

        wait_until(
            listening_or_dead,
            timeout=self.startup_timeout,
            message=lambda: f"rotel did not listen on :{port}\n{self.log_text()}",
        )
        if not self.running:
            code = self._proc.returncode if self._proc is not None else None
            raise RuntimeError(f"rotel exited with {code} during startup:\n{self.log_text()}")

    def kill(self) -> None:
        """SIGKILL the agent: no flush, no goodbye -- a simulated crash."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10.0)
        self._proc = None

    def restart(self) -> RotelCollector:
        """Stop (gracefully, if still running) and start again on the same ports."""
        self.stop()
        return self.start()

    def __enter__(self) -> RotelCollector:
        return self.start()
