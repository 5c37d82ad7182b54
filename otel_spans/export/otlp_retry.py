"""The OTLP exporter specification's send loop, shared by the gRPC and HTTP senders.

The scheduler's spans and logs are encoded by :mod:`otel_spans.export.wire` (for speed),
so they need a sender for bytes rather than the SDK's exporters. What the specification
asks of every transport lives here once: retryable answers are retried with exponential
back-off and ±20% jitter, a server's delay (gRPC ``RetryInfo``, HTTP ``Retry-After``)
sets the back-off, ``timeout`` bounds the whole export, retries included, and
``shutdown`` aborts a back-off at once. The response is decoded, so items a collector
rejected through *partial success* are counted (and its message logged, rate-limited)
instead of being counted as exported. A request that finds its kept-alive connection
closed by the server is sent again at once, once, instead of waiting out a back-off.
One attempt over the wire is each transport's own (:mod:`.grpc_sender`,
:mod:`.http_sender`).
"""

from __future__ import annotations

import functools
import logging
import platform
import random
import threading
import time

from otel_spans import __version__
from otel_spans.export.outcome import ACCEPTED, REFUSED, Sent
from otel_spans.export.response import partial_success
from otel_spans.redact import redact_url
from otel_spans.settings import ExportTarget, bounded
from otel_spans.throttle import Throttle

logger = logging.getLogger("otel_spans")

_MAX_ATTEMPTS = 6
#: At most one warning per this many seconds (a collector that is down fails every batch).
_WARN_EVERY = 30.0
#: What the collector's partial success counts, by signal (for its message).
_REJECTED_ITEMS = {"traces": "spans", "logs": "log records", "metrics": "data points"}
#: An attempt's answer: a final :class:`Sent`, or seconds to wait before the next
#: attempt (0: the default back-off; :data:`AT_ONCE`: now, once per export).
Answer = Sent | float
AT_ONCE = -1.0


@functools.cache
def user_agent() -> str:
    """What both transports send as their user agent: this package and its version,
    and the language with its version, as the OTLP exporter specification asks
    (``otel-spans/0.2.0 (python/3.12.3)``)."""
    return f"otel-spans/{__version__} (python/{platform.python_version()})"


class OtlpSender:
    """Sends serialized export requests of one signal (``traces``, ``logs``, ``metrics``)
    to ``target``.

    An HTTP ``target.endpoint`` is the signal's full URL (``.../v1/logs``). A transport
    subclasses it with one ``_attempt`` (and ``_body`` when it transforms the request).
    """

    def __init__(self, target: ExportTarget, signal: str):
        assert target.endpoint is not None
        self.target = target
        self.signal = signal
        self.endpoint: str = target.endpoint
        self._stopping = threading.Event()
        self._warnings = Throttle(_WARN_EVERY)

    def _warn(self, message: str, *args: object) -> None:
        shown = [redact_url(a) if isinstance(a, str) else a for a in args]
        self._warnings.log(logging.WARNING, message, *shown)

    def send(self, request: bytes, timeout: float | None = None) -> Sent:
        """What the collector did with the request (accepted, with how many items it
        rejected; refused; too large), retries included, within ``target.timeout``
        (or ``timeout`` seconds when that is shorter: the metric reader's own bound)."""
        limit = self.target.timeout if timeout is None else min(timeout, self.target.timeout)
        deadline = time.monotonic() + limit
        body = self._body(request)
        at_once_left = True
        attempt = 0
        while attempt < _MAX_ATTEMPTS:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            answer = self._attempt(body, bounded(remaining))
            if isinstance(answer, Sent):
                return answer
            if answer == AT_ONCE:
                if at_once_left:
                    at_once_left = False
                    continue  # a stale kept-alive connection: the next one is fresh
                answer = 0.0
            backoff = answer or 2**attempt * random.uniform(0.8, 1.2)
            attempt += 1
            if attempt == _MAX_ATTEMPTS or backoff > deadline - time.monotonic():
                break
            if self._stopping.wait(backoff):
                break
        self._warn(
            "otel-spans: exporting %s to %s failed after retries", self.signal, self.endpoint
        )
        return REFUSED

    def _accepted(self, response: bytes) -> Sent:
        """Decode a success response: a partial success is counted and logged."""
        try:
            rejected, error_message = partial_success(response)
        except (ValueError, IndexError):  # an empty or foreign body is a plain success
            return ACCEPTED
        if rejected or error_message:
            self._warn(
                "otel-spans: the collector at %s rejected %d %s of a request: %s",
                self.endpoint,
                rejected,
                _REJECTED_ITEMS.get(self.signal, "items"),
                error_message or "(no message)",
            )
        return Sent(True, rejected=rejected)

    def _body(self, request: bytes) -> bytes:
        """What every attempt sends (built once per export, not per retry)."""
        return request

    def _attempt(self, body: bytes, timeout: float) -> Answer:
        raise NotImplementedError

    def shutdown(self) -> None:
        self._stopping.set()
