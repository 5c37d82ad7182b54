"""Jaeger v2 (all-in-one, in-memory storage) for tests: OTLP traces in, its query API out.

Jaeger v2 is an OpenTelemetry Collector distribution: its configuration is a collector
config whose ``jaeger_storage`` extension holds the traces (a ``memory`` backend here),
whose ``jaeger_query`` extension serves the HTTP API the UI reads, and whose traces
pipeline runs an ``otlp`` receiver into ``jaeger_storage_exporter``. Every port is a
free loopback port and the collector's own metrics are off, so that two Jaegers (or a
Jaeger and a collector) never fight over the default ``:8888``.

What a test asserts is what the UI would show: ``/api/traces`` and
``/api/traces/{id}`` return Jaeger's JSON model after its adjusters ran (parent
references, clock skew), with their complaints in each trace's ``warnings``.
"""

from __future__ import annotations

import json
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .backends import backend_binary
from .ports import LOOPBACK, free_port
from .process import ServerProcess

#: The name of the storage backend in the generated config (any name would do).
STORAGE = "memstore"


class JaegerQueryError(RuntimeError):
    """The query API answered with an error (``errors`` in its JSON)."""


class JaegerServer(ServerProcess):
    """``jaeger --config=FILE`` with OTLP gRPC/HTTP and the query API on free ports."""

    def __init__(self, binary: Path | None = None, max_traces: int = 10_000) -> None:
        self.binary = binary or backend_binary("jaeger")
        self.max_traces = max_traces
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.query_port = free_port()
        self.query_grpc_port = free_port()
        self._tmpdir = Path(tempfile.mkdtemp(prefix="otel-spans-jaeger-"))
        self.config_path = self._tmpdir / "jaeger.yaml"
        self.log_path = self._tmpdir / "jaeger.log"
        self._log_fh = None
        self._proc = None

    def config(self) -> dict[str, Any]:
        """The collector config Jaeger runs (JSON is YAML)."""
        return {
            "service": {
                "extensions": ["jaeger_storage", "jaeger_query"],
                "pipelines": {
                    "traces": {"receivers": ["otlp"], "exporters": ["jaeger_storage_exporter"]}
                },
                "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "info"}},
            },
            "extensions": {
                "jaeger_storage": {
                    "backends": {STORAGE: {"memory": {"max_traces": self.max_traces}}}
                },
                "jaeger_query": {
                    "storage": {"traces": STORAGE},
                    "http": {"endpoint": f"{LOOPBACK}:{self.query_port}"},
                    "grpc": {"endpoint": f"{LOOPBACK}:{self.query_grpc_port}"},
                },
            },
            "receivers": {
                "otlp": {
                    "protocols": {
                        "grpc": {"endpoint": f"{LOOPBACK}:{self.grpc_port}"},
                        "http": {"endpoint": f"{LOOPBACK}:{self.http_port}"},
                    }
                }
            },
            "exporters": {"jaeger_storage_exporter": {"trace_storage": STORAGE}},
        }

    @property
    def otlp_grpc_address(self) -> str:
        """``host:port`` of the OTLP gRPC receiver (what a collector's exporter names)."""
        return f"{LOOPBACK}:{self.grpc_port}"

    @property
    def query_url(self) -> str:
        return f"http://{LOOPBACK}:{self.query_port}"

    def start(self, timeout: float = 60.0) -> JaegerServer:
        self.config_path.write_text(json.dumps(self.config(), indent=2) + "\n")
        self.launch([self.binary, f"--config={self.config_path}"])
        self.wait_ready(self._answers, "Jaeger", timeout)
        return self

    def _answers(self) -> bool:
        try:
            self.api("/api/services")
        except (OSError, JaegerQueryError):
            return False
        return True

    def __enter__(self) -> JaegerServer:
        return self.start()

    # -- the query API (what the UI reads) ----------------------------------------------
    def api(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """GET ``path`` and return ``data``; raise on ``errors``."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        url = f"{self.query_url}{path}{query}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None  # a trace id Jaeger does not hold (yet)
            raise JaegerQueryError(f"{url}: HTTP {exc.code}: {exc.read()[:2000]!r}") from exc
        if body.get("errors"):
            raise JaegerQueryError(f"{url}: {body['errors']}")
        return body.get("data")

    def services(self) -> list[str]:
        return sorted(self.api("/api/services") or [])

    def operations(self, service: str) -> list[str]:
        quoted = urllib.parse.quote(service, safe="")
        return sorted(self.api(f"/api/services/{quoted}/operations") or [])

    def find_traces(
        self,
        service: str,
        operation: str | None = None,
        tags: Mapping[str, str] | None = None,
        lookback: str = "1h",
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """The search the UI runs: traces with a span of ``service`` matching the rest."""
        params = {"service": service, "lookback": lookback, "limit": str(limit)}
        if operation is not None:
            params["operation"] = operation
        if tags:
            params["tags"] = json.dumps(dict(tags))
        return list(self.api("/api/traces", params) or [])

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """One trace by id (32 hex digits), as the trace view shows it; None if unknown."""
        data = self.api(f"/api/traces/{trace_id}")
        if not data:
            return None
        (trace,) = data
        result: dict[str, Any] = trace
        return result
