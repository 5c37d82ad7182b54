"""One OTLP/HTTP export attempt: status codes, ``Retry-After``, no redirects.

Its own module because everything HTTP-specific is here: the ``requests`` session and
headers, gzip, which statuses are retryable (429, 502, 503, 504), ``Retry-After`` in
seconds or as an HTTP date, 413 asking the caller to split the batch, a redirect
refused (an exporter must not send telemetry to a place it was not configured with),
a kept-alive connection the server closed, retried at once, and a response body read
only up to :data:`MAX_RESPONSE_BYTES` after decompression, as the OTLP specification
asks (a gzip bomb must not take the scheduler's memory). The send loop around an
attempt is :class:`~otel_spans.export.otlp_retry.OtlpSender`'s.
"""

from __future__ import annotations

import email.utils
import gzip
import time
from typing import Any

from otel_spans.export.otlp_retry import AT_ONCE, Answer, OtlpSender, logger, user_agent
from otel_spans.export.outcome import REFUSED, Sent
from otel_spans.settings import ExportTarget

_RETRYABLE_HTTP = frozenset({429, 502, 503, 504})
#: Most bytes of a collector's response body read, after decompression. An answer is a
#: few bytes (a partial success); a longer one is not read on, the export counts as
#: failed and is not retried (the same collector would answer the same).
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
#: Bytes asked of the decoder at a time: what one read may hold beyond the cap.
_CHUNK = 64 * 1024


class HttpSender(OtlpSender):
    """``session`` None: a plain ``requests`` session."""

    def __init__(self, target: ExportTarget, signal: str, session: Any):
        super().__init__(target, signal)
        import requests

        self._session = session or requests.Session()
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
                stream=True,  # the body is read below, up to MAX_RESPONSE_BYTES
            )
        except requests.Timeout as error:
            logger.debug("otel-spans: %s export: %s", self.signal, type(error).__name__)
            return 0.0
        except requests.ConnectionError as error:
            logger.debug("otel-spans: %s export: %r", self.signal, error)
            return AT_ONCE if _closed_by_server(error) else 0.0
        with response:
            return self._answer(response)

    def _answer(self, response: Any) -> Answer:
        """What one response says; its body is read only where it matters, capped."""
        status = response.status_code
        if 200 <= status < 300:
            content = read_capped(response, MAX_RESPONSE_BYTES)
            if content is None:
                self._warn(
                    "otel-spans: the collector at %s answered %s with a body over %d bytes "
                    "(decompressed), which is not read: counted as failed, not retried",
                    self.endpoint,
                    self.signal,
                    MAX_RESPONSE_BYTES,
                )
                return REFUSED
            return self._accepted(content)
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
            _status_message(read_capped(response, MAX_RESPONSE_BYTES) or b""),
        )
        return REFUSED

    def shutdown(self) -> None:
        super().shutdown()
        self._session.close()


def read_capped(response: Any, limit: int) -> bytes | None:
    """The body of a streamed ``requests`` response, decompressed (``Content-Encoding``
    gzip or deflate), or None once it passes ``limit`` bytes: reading stops there."""
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_content(chunk_size=_CHUNK):
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
    except Exception as error:  # a body cut short or undecodable: an empty answer
        logger.debug("otel-spans: reading a collector's answer: %r", error)
        return b"".join(chunks)
    return b"".join(chunks)


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
