"""VictoriaMetrics: a real OTLP metrics backend (OTLP/HTTP in, PromQL out).

Debian's Prometheus has its OTLP receiver patched out, so the OTLP → Prometheus-name
mapping and the pushed values are checked against VictoriaMetrics 1.112 from Debian
trixie (bookworm's 1.79 predates OTLP ingestion), fetched and extracted by
``tests/tools/victoriametrics.sh`` into ``~/.cache/victoriametrics`` (a few seconds the
first time, reused after). ``-opentelemetry.usePrometheusNaming`` makes it store the
Prometheus names (unit and ``_total`` suffixes, ``_`` for ``.``), as the OTLP receivers
of Prometheus and of the collector's Prometheus exporters do.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.requirements import unavailable

from .victoria import VictoriaServer

FETCH_SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "victoriametrics.sh"


def victoriametrics_binary() -> Path:
    """The ``victoria-metrics`` binary (fetched if needed), or skip/fail."""
    explicit = os.environ.get("VICTORIAMETRICS_BINARY")
    if explicit:
        return Path(explicit)
    try:
        done = subprocess.run(
            ["bash", str(FETCH_SCRIPT)], capture_output=True, text=True, timeout=300, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        unavailable("VictoriaMetrics", f"{FETCH_SCRIPT} did not run: {exc}")
    path = Path(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None
    if done.returncode != 0 or path is None or not path.exists():
        unavailable("VictoriaMetrics", f"{FETCH_SCRIPT} failed: {done.stderr[-2000:]}")
    return path


class VictoriaMetrics(VictoriaServer):
    """One single-node server on a free loopback port, with its own storage dir."""

    label = "VictoriaMetrics"
    tmp_prefix = "otel-spans-vm-"
    log_name = "victoria-metrics.log"

    def __init__(self, binary: Path | None = None):
        super().__init__(binary or victoriametrics_binary())

    @property
    def otlp_metrics_endpoint(self) -> str:
        """Where OTLP/HTTP metrics (protobuf) go."""
        return f"{self.url}/opentelemetry/v1/metrics"

    def start(self, timeout: float = 30.0) -> VictoriaMetrics:
        self.start_with(
            [
                "-opentelemetry.usePrometheusNaming",
                # samples are searchable at once, not after the default 30 s cache
                "-search.latencyOffset=0s",
                "-search.disableCache",
            ],
            timeout,
        )
        return self

    def __enter__(self) -> VictoriaMetrics:
        return self.start()

    def api(self, path: str, params: dict[str, str] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as response:
            body = json.load(response)
        assert body.get("status") == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("/api/v1/query", {"query": promql})["result"]
        return result

    def metric_names(self) -> set[str]:
        return set(self.api("/api/v1/label/__name__/values"))

    def flush(self) -> None:
        """Make every ingested sample searchable now (VictoriaMetrics' own debug hook)."""
        with urllib.request.urlopen(f"{self.url}/internal/force_flush", timeout=10) as response:
            response.read()
