"""One OTLP/HTTP export attempt: status codes, ``Retry-After``, no redirects.

Its own module because everything HTTP-specific is here: the ``requests`` session and
headers, gzip, which statuses are retryable (429, 502, 503, 504), ``Retry-After`` in
seconds or as an HTTP date, 413 asking the caller to split the batch, a redirect
refused (an exporter must not send telemetry to a place it was not configured with),
a kept-alive connection the server closed, retried at once, and the answer read only
up to :data:`~otel_spans.export.http_session.MAX_RESPONSE_BYTES` after decompression
(past it the export fails, counted and not retried). The send loop around an attempt
is :class:`~otel_spans.export.otlp_retry.OtlpSender`'s.
"""

from __future__ import annotations

import email.utils
import gzip
import time
from typing import Any

from otel_spans.export.http_session import MAX_RESPONSE_BYTES, ResponseTooLarge, http_session
from otel_spans.export.otlp_retry import AT_ONCE, Answer, OtlpSender, logger, user_agent
from otel_spans.export.outcome import REFUSED, Sent
from otel_spans.settings import ExportTarget

_RETRYABLE_HTTP = frozenset({429, 502, 503, 504})


class HttpSender(OtlpSender):
    """``session`` None: a plain ``requests`` session."""

    def __init__(self, target: ExportTarget, signal: str, session: Any):
        super().__init__(target, signal)

        # Its answers capped (and its CA pinned) even when one is handed in bare.
        self._session = session or http_session(target)
        self._session.verify = target.certificate or True
        if target.client_certificate and target.client_key:
            self._session.cert = (target.client_certificate, target.client_key)
        elif target.client_certificate:
            self._session.cert = target.client_certificate
        self._headers = {
            **target.headers,
            "Content-Type": "application/x-protobuf",
            "User-Agent": user_agent(),
        }
        if target.compression:
            self._headers["Content-Encoding"] = "gzip"

    def _body(self, request: bytes) -> bytes:
        return gzip.compress(request) if self.target.compression else request

    def _attempt(self, body: bytes, timeout: float) -> Answer:
        import requests

        try:
            response = self._session.post(
                self.endpoint,
                data=body,
                headers=self._headers,
                timeout=timeout,
                allow_redirects=False,
            )
        except ResponseTooLarge:
            self._warn(
                "otel-spans: the collector at %s answered %s with a body over %d bytes "
                "(decompressed), which is not read: counted as failed, not retried",
                self.endpoint,
                self.signal,
                MAX_RESPONSE_BYTES,
            )
            return REFUSED
        except requests.Timeout as error:
            logger.debug("otel-spans: %s export: %s", self.signal, type(error).__name__)
            return 0.0
        except requests.ConnectionError as error:
            logger.debug("otel-spans: %s export: %r", self.signal, error)
            return AT_ONCE if _closed_by_server(error) else 0.0
        status = response.status_code
        if 200 <= status < 300:
            return self._accepted(response.content)  # read by the session, capped
        if status == 413:
            return Sent(False, too_large=True)
        if 300 <= status < 400:
            self._warn(
                "otel-spans: the collector at %s answered %s with a redirect to %s, which "
                "is not followed: configure that endpoint instead",
                self.endpoint,
                self.signal,
                response.headers.get("Location", "(nowhere)"),
            )
            return REFUSED
        if status in _RETRYABLE_HTTP:
            return retry_after_seconds(response.headers.get("Retry-After"))
        self._warn(
            "otel-spans: the collector refused %s: HTTP %d %s",
            self.signal,
            status,
            _status_message(response.content),
        )
        return REFUSED

    def shutdown(self) -> None:
        super().shutdown()
        self._session.close()


def retry_after_seconds(value: str | None, now: float | None = None) -> float:
    """An HTTP ``Retry-After``: delay-seconds or an HTTP date; 0 (the default back-off)
    when absent or unreadable."""
    if not value:
        return 0.0
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _closed_by_server(error: Exception) -> bool:
    """The server closed a kept-alive connection as the request went out: nothing was
    processed, and a fresh connection will do."""
    text = repr(error)
    return any(
        sign in text
        for sign in ("RemoteDisconnected", "Connection aborted", "ConnectionResetError")
    )


def _status_message(body: bytes) -> str:
    """The message of the ``google.rpc.Status`` an OTLP/HTTP error carries, if any."""
    from google.rpc import status_pb2

    try:
        return str(status_pb2.Status.FromString(body).message)
    except Exception:
        return ""
