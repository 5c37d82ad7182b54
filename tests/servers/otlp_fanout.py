"""One OTLP/HTTP endpoint whose requests reach several backends, unchanged.

``deploy/collector-config.yaml`` names one metrics backend; the end-to-end test asks
the same run's metrics of Prometheus 3 under more than one OTLP translation strategy
(tests/deploy/test_backends.py) without running the workload once per strategy. An
``otlphttp`` exporter posts ``<endpoint>/v1/metrics``: each POST goes, with its body
and its ``Content-Type`` and ``Content-Encoding``, to the same path under every
target in turn, and is answered with the first target's answer (what the collector
counts as sent or failed). A target that does not accept a request is recorded in
:attr:`OtlpFanout.failures`, for the test to assert there are none.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .ports import LOOPBACK

__all__ = ["OtlpFanout"]

#: Headers forwarded as they came (the rest are the transport's).
_FORWARDED = ("Content-Type", "Content-Encoding")


class _Handler(BaseHTTPRequestHandler):
    server: _FanoutServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {h: self.headers[h] for h in _FORWARDED if self.headers.get(h)}
        owner = self.server.owner
        answers = [owner.forward(target, self.path, body, headers) for target in owner.targets]
        status, content_type, reply = answers[0]
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


class _FanoutServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: OtlpFanout) -> None:
        super().__init__((LOOPBACK, 0), _Handler)
        self.owner = owner


class OtlpFanout:
    """Forwards every OTLP/HTTP request to each of ``targets`` (base URLs, as
    ``PrometheusServer.otlp_endpoint``)."""

    def __init__(self, targets: Sequence[str]) -> None:
        if not targets:
            raise ValueError("OtlpFanout needs at least one target")
        self.targets = list(targets)
        #: "<target><path>: HTTP <status> <body>" of each request a target refused.
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._server: _FanoutServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        """What the exporter is pointed at (``/v1/metrics`` is appended by it)."""
        assert self._server is not None, "not started"
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    def forward(
        self, target: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        """POST one request to one target; (status, content type, body) of its answer."""
        request = urllib.request.Request(target + path, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10.0) as response:
                answer = (
                    int(response.status),
                    response.headers.get("Content-Type", "application/x-protobuf"),
                    response.read(),
                )
        except urllib.error.HTTPError as exc:
            answer = (exc.code, exc.headers.get("Content-Type", "text/plain"), exc.read())
        except OSError as exc:
            answer = (502, "text/plain", str(exc).encode())
        with self._lock:
            if answer[0] >= 300:
                self.failures.append(f"{target}{path}: HTTP {answer[0]} {answer[2][:500]!r}")
        return answer

    def start(self) -> OtlpFanout:
        self._server = _FanoutServer(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="otlp-fanout", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._server = self._thread = None

    def __enter__(self) -> OtlpFanout:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
