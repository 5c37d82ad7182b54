"""VictoriaLogs: an OTLP logs store for tests, where the deploy stack has Loki.

Loki is AGPL-licensed and is not built here; VictoriaLogs (Apache-2.0, built from its Go
module by ``tests/backends/build``) ingests the same OTLP/HTTP logs the collector's
``otlp_http/loki`` exporter sends (``/insert/opentelemetry/v1/logs``) and answers LogsQL
at ``/select/logsql/query``, one JSON object per line, every field a string (resource
and record attributes under their OTLP names, the body in ``_msg``).
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from .backends import backend_binary
from .victoria import VictoriaServer


class VictoriaLogs(VictoriaServer):
    """One server on a free loopback port, with its own storage directory."""

    label = "VictoriaLogs"
    tmp_prefix = "otel-spans-vl-"
    log_name = "victoria-logs.log"

    def __init__(self, binary: Path | None = None) -> None:
        super().__init__(binary or backend_binary("victorialogs"))

    @property
    def otlp_endpoint(self) -> str:
        """The OTLP/HTTP base an exporter appends ``/v1/logs`` to."""
        return f"{self.url}/insert/opentelemetry"

    def start(self, timeout: float = 60.0) -> VictoriaLogs:
        self.start_with([], timeout)
        return self

    def __enter__(self) -> VictoriaLogs:
        return self.start()

    def query(self, logsql: str, limit: int = 1000) -> list[dict[str, Any]]:
        """The records a LogsQL query selects (``*``: all), newest last."""
        data = urllib.parse.urlencode({"query": logsql, "limit": str(limit)}).encode()
        request = urllib.request.Request(f"{self.url}/select/logsql/query", data=data)
        with urllib.request.urlopen(request, timeout=10) as response:
            lines = response.read().decode().splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
        return sorted(records, key=lambda r: str(r.get("_time", "")))
