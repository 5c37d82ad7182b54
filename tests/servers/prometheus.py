"""Run a real Prometheus server (and promtool) for tests.

Why: what users finally look at is PromQL over what Prometheus stored.
Metric names, label sets, ``_total``/unit suffixes and exemplars are only
proven right when a real Prometheus accepts them and answers a query.  The
server runs on a free loopback port with a throw-away data dir and a
generated config, and is stopped by pid.

Capabilities depend on the installed build, and are detected rather than
assumed (:func:`prometheus_capabilities`):

* OTLP ingestion (``/api/v1/otlp/v1/metrics``) needs Prometheus >= 2.47
  (``--enable-feature=otlp-write-receiver``) or >= 3.0
  (``--web.enable-otlp-receiver``).  Debian bookworm ships 2.42, which has
  *no* OTLP receiver at all; :attr:`PrometheusServer.otlp_supported` tells
  tests to skip, and :attr:`PrometheusServer.otlp_endpoint` raises.
* Exemplar storage (``--enable-feature=exemplar-storage``, >= 2.26) is
  enabled whenever available; exemplars arrive via OpenMetrics scrapes.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import subprocess
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from .ports import LOOPBACK, free_port, port_open, wait_until
from .process import ServerProcess

__all__ = [
    "OPENMETRICS_CONTENT_TYPE",
    "PROMETHEUS_TEXT_CONTENT_TYPE",
    "ExpositionServer",
    "OtlpUnsupportedError",
    "PrometheusCapabilities",
    "PrometheusQueryError",
    "PrometheusServer",
    "prometheus_capabilities",
    "promtool_check_config",
    "promtool_check_metrics",
    "sample_value",
]

PROMETHEUS_BINARY = "/usr/bin/prometheus"
PROMTOOL_BINARY = "/usr/bin/promtool"

PROMETHEUS_TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Prometheus only parses exemplars from the OpenMetrics format.
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

Result = dict[str, Any]


class PrometheusQueryError(RuntimeError):
    """The HTTP API answered with ``status: error`` (e.g. bad PromQL)."""


class OtlpUnsupportedError(RuntimeError):
    """This Prometheus build has no OTLP receiver."""


@dataclass(frozen=True)
class PrometheusCapabilities:
    """What the installed Prometheus binary can do."""

    #: (major, minor, patch) from ``prometheus --version``; :data:`UNKNOWN_VERSION` when
    #: the build has none stamped in.
    version: tuple[int, int, int]
    #: Command-line flags enabling the OTLP receiver; None if unsupported.
    otlp_flags: tuple[str, ...] | None
    #: Whether ``--enable-feature=exemplar-storage`` exists.
    exemplar_storage: bool


#: The version of a build that does not say its own (its capabilities come from --help).
UNKNOWN_VERSION = (0, 0, 0)


def _run(cmd: Sequence[str], stdin: str | None = None, timeout: float = 30.0) -> tuple[int, str]:
    proc = subprocess.run(
        list(cmd),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc.returncode, (proc.stdout + proc.stderr)


@functools.cache
def prometheus_capabilities(binary: str = PROMETHEUS_BINARY) -> PrometheusCapabilities:
    """Detect version and feature flags of *binary* (cached per path)."""
    if not Path(binary).is_file():
        raise FileNotFoundError(f"{binary} not found (apt-get install prometheus)")
    _, version_out = _run([binary, "--version"])
    _, help_out = _run([binary, "--help"])
    match = re.search(r"version v?(\d+)\.(\d+)\.(\d+)", version_out)
    if match is not None:
        version = (int(match[1]), int(match[2]), int(match[3]))
    elif "--web.listen-address" in help_out:
        # Built from its Go module (tests/backends/prometheus), Prometheus has no version
        # stamped in (release builds set it with -ldflags): the flags below come from
        # --help, which lists every flag and feature this build has.
        version = UNKNOWN_VERSION
    else:
        raise RuntimeError(f"cannot parse prometheus version from: {version_out!r}")
    otlp_flags: tuple[str, ...] | None
    if "web.enable-otlp-receiver" in help_out or version >= (3, 0, 0):
        otlp_flags = ("--web.enable-otlp-receiver",)
    elif "otlp-write-receiver" in help_out or version >= (2, 47, 0):
        otlp_flags = ("--enable-feature=otlp-write-receiver",)
    else:
        otlp_flags = None
    exemplars = "exemplar-storage" in help_out or version >= (2, 26, 0)
    return PrometheusCapabilities(version, otlp_flags, exemplars)


def promtool_check_config(path: str | Path) -> tuple[bool, str]:
    """Run ``promtool check config``; returns (ok, combined output)."""
    code, out = _run([PROMTOOL_BINARY, "check", "config", str(path)])
    return code == 0, out


def promtool_check_metrics(text: str) -> tuple[bool, str]:
    """Lint exposition *text* with ``promtool check metrics``.

    ``ok`` is False both for parse errors and for lint findings such as a
    counter without ``_total`` -- exactly what a test about naming wants.
    """
    code, out = _run([PROMTOOL_BINARY, "check", "metrics"], stdin=text)
    return code == 0, out


def sample_value(result: Result) -> float:
    """The float value of one instant-vector *result* from :meth:`query`."""
    return float(result["value"][1])


class PrometheusServer(ServerProcess):
    """A Prometheus server on 127.0.0.1 with a generated config.

    *scrape_targets* are ``"host:port"`` strings scraped every
    *scrape_interval* under job *job_name*.  *extra_config* is merged into
    the top level of the generated config (e.g. an ``otlp:`` section on
    Prometheus 3).  The config is JSON, which is valid YAML.
    """

    stop_timeout = 10.0

    def __init__(
        self,
        scrape_targets: Sequence[str] = (),
        *,
        job_name: str = "test",
        scrape_interval: str = "1s",
        metrics_path: str = "/metrics",
        enable_otlp: bool = True,
        extra_config: Mapping[str, Any] | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 30.0,
        binary: str = PROMETHEUS_BINARY,
    ) -> None:
        self.binary = binary
        self.capabilities = prometheus_capabilities(binary)
        self.scrape_targets = list(scrape_targets)
        self.job_name = job_name
        self.scrape_interval = scrape_interval
        self.metrics_path = metrics_path
        self.enable_otlp = enable_otlp
        self.extra_config = dict(extra_config or {})
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self._tmpdir = Path(tempfile.mkdtemp(prefix="prometheus-test-"))
        self.config_path = self._tmpdir / "prometheus.yml"
        self.data_dir = self._tmpdir / "data"
        self.log_path = self._tmpdir / "prometheus.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_fh: IO[bytes] | None = None

    # -- config ------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """The configuration this server is (or will be) started with."""
        cfg: dict[str, Any] = {
            "global": {
                "scrape_interval": self.scrape_interval,
                "evaluation_interval": self.scrape_interval,
            },
            "scrape_configs": [],
        }
        if self.scrape_targets:
            cfg["scrape_configs"].append(
                {
                    "job_name": self.job_name,
                    "scrape_interval": self.scrape_interval,
                    "scrape_timeout": self.scrape_interval,
                    "metrics_path": self.metrics_path,
                    "static_configs": [{"targets": self.scrape_targets}],
                }
            )
        cfg.update(self.extra_config)
        return cfg

    def write_config(self) -> Path:
        """Write :meth:`config` to :attr:`config_path` and return the path."""
        self.config_path.write_text(json.dumps(self.config(), indent=2) + "\n")
        return self.config_path

    @property
    def command(self) -> list[str]:
        """The full command line Prometheus is started with."""
        features: list[str] = []
        flags: list[str] = []
        if self.capabilities.exemplar_storage:
            features.append("exemplar-storage")
        if self.enable_otlp and self.capabilities.otlp_flags:
            for flag in self.capabilities.otlp_flags:
                prefix = "--enable-feature="
                if flag.startswith(prefix):
                    features.append(flag[len(prefix) :])
                else:
                    flags.append(flag)
        if features:
            flags.append("--enable-feature=" + ",".join(features))
        return [
            self.binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            *flags,
            *self.extra_args,
        ]

    # -- addresses ---------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL of the web UI / HTTP API."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def otlp_supported(self) -> bool:
        """Whether OTLP pushes to :attr:`otlp_endpoint` will be accepted."""
        return self.enable_otlp and self.capabilities.otlp_flags is not None

    @property
    def otlp_endpoint(self) -> str:
        """Base URL for OTLP/HTTP pushes; append ``/v1/metrics``.

        Raises :class:`OtlpUnsupportedError` on builds without a receiver
        rather than handing out a URL that would only answer 404.
        """
        if not self.otlp_supported:
            major, minor, patch = self.capabilities.version
            raise OtlpUnsupportedError(
                f"prometheus {major}.{minor}.{patch} has no OTLP receiver "
                "(needs >= 2.47), or enable_otlp=False"
            )
        return f"{self.url}/api/v1/otlp"

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> PrometheusServer:
        """Write the config, start Prometheus and wait for ``/-/ready``."""
        if self.running:
            return self
        self.write_config()
        if self._log_fh is None:
            self._log_fh = open(self.log_path, "ab")  # noqa: SIM115 - lives across restarts
        self._proc = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_until(
                lambda: not self.running or self._ready(),
                timeout=self.startup_timeout,
                message=lambda: f"prometheus not ready\n{self.log_text()}",
            )
            if not self.running:
                code = self._proc.returncode if self._proc is not None else None
                raise RuntimeError(f"prometheus exited with {code}:\n{self.log_text()}")
        except BaseException:
            self.stop(timeout=2.0)
            raise
        return self

    def _ready(self) -> bool:
        if not port_open(LOOPBACK, self.port):
            return False
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2.0) as resp:
                return int(resp.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def __enter__(self) -> PrometheusServer:
        return self.start()

    # -- HTTP API ----------------------------------------------------------

    def api(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """GET ``/api/v1/<path>`` and return ``data``; raise on API errors."""
        query = urllib.parse.urlencode(params or {})
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=10.0) as resp:
                payload = json.load(resp)
        except urllib.error.HTTPError as exc:
            # 4xx/5xx still carry a JSON body with the reason.
            body = exc.read().decode(errors="replace")
            raise PrometheusQueryError(f"{url}: HTTP {exc.code}: {body}") from exc
        if payload.get("status") != "success":
            raise PrometheusQueryError(f"{url}: {payload.get('error', payload)}")
        return payload["data"]

    def query(self, promql: str, at: float | None = None) -> list[Result]:
        """Instant query; returns ``data.result`` (list of dicts).

        Each vector element looks like
        ``{"metric": {"__name__": ..., labels...}, "value": [ts, "1.5"]}``;
        see :func:`sample_value`.
        """
        params = {"query": promql}
        if at is not None:
            params["time"] = repr(at)
        data = self.api("query", params)
        result = data["result"]
        if data.get("resultType") == "scalar" or data.get("resultType") == "string":
            return [{"metric": {}, "value": result}]
        return list(result)

    def wait_for_query(
        self,
        promql: str,
        predicate: Callable[[list[Result]], bool] | None = None,
        timeout: float = 20.0,
    ) -> list[Result]:
        """Poll :meth:`query` until *predicate* (default: non-empty) holds."""
        check = predicate or bool
        last: list[list[Result]] = [[]]

        def attempt() -> list[Result] | None:
            last[0] = self.query(promql)
            return last[0] if check(last[0]) else None

        wait_until(
            attempt,
            timeout=timeout,
            interval=0.2,
            message=lambda: (
                f"PromQL {promql!r}: last result {last[0]!r}; targets: {self._target_health()}"
            ),
        )
        return last[0]

    def query_exemplars(self, promql: str, start: float, end: float) -> list[Result]:
        """``/api/v1/query_exemplars`` over [start, end] (unix seconds)."""
        params = {"query": promql, "start": repr(start), "end": repr(end)}
        data = self.api("query_exemplars", params)
        return list(data or [])

    def targets(self) -> list[Result]:
        """Active scrape targets with health and last error."""
        return list(self.api("targets")["activeTargets"])

    def _target_health(self) -> list[tuple[str, str, str]]:
        with contextlib.suppress(Exception):
            return [(t["scrapeUrl"], t["health"], t.get("lastError", "")) for t in self.targets()]
        return []


class _ExpositionHandler(BaseHTTPRequestHandler):
    server: _ExpositionHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silence access logs."""

    def do_GET(self) -> None:
        body, content_type = self.server.owner._serve()
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _ExpositionHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], owner: ExpositionServer) -> None:
        self.owner = owner
        super().__init__(address, _ExpositionHandler)


class ExpositionServer:
    """A tiny scrape target serving fixed exposition text on any GET path.

    Lets a test control exactly what Prometheus scrapes (e.g. to check that
    Prometheus accepts a naming scheme or an exemplar), and counts scrapes so
    the test can wait for one instead of sleeping.
    """

    def __init__(self, text: str = "", content_type: str = PROMETHEUS_TEXT_CONTENT_TYPE) -> None:
        self._lock = threading.Lock()
        self._text = text
        self._content_type = content_type
        self._scrapes = 0
        self._server: _ExpositionHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def set_text(self, text: str, content_type: str | None = None) -> None:
        """Replace what the next scrape returns."""
        with self._lock:
            self._text = text
            if content_type is not None:
                self._content_type = content_type

    def _serve(self) -> tuple[bytes, str]:
        with self._lock:
            self._scrapes += 1
            return self._text.encode(), self._content_type

    @property
    def scrape_count(self) -> int:
        """How many GETs were served so far."""
        with self._lock:
            return self._scrapes

    @property
    def target(self) -> str:
        """``host:port`` as used in a Prometheus ``static_configs`` entry."""
        if self._server is None:
            raise RuntimeError("ExpositionServer not started")
        return f"{LOOPBACK}:{self._server.server_address[1]}"

    def start(self) -> ExpositionServer:
        """Bind a kernel-chosen port and serve in a daemon thread."""
        if self._server is None:
            self._server = _ExpositionHTTPServer((LOOPBACK, 0), self)
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="exposition-server",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def __enter__(self) -> ExpositionServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
