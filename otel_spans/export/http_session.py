"""The ``requests`` session of every OTLP/HTTP export: its CA pinned, its answers capped.

Both the scheduler's sender (:mod:`.http_sender`) and the SDK's OTLP/HTTP exporters
(workers' spans, every process's metrics) post through a session made here, so two
rules hold for all of them. A configured CA is the one verified against, whatever
``REQUESTS_CA_BUNDLE`` says. And a collector's answer is read only up to
:data:`MAX_RESPONSE_BYTES` after decompression, as the OTLP specification asks: an
answer is a few bytes (a partial success), and a gzip bomb must not take a scheduler's
or a worker's memory. Past the cap the export fails, is counted and is not retried.
"""

from __future__ import annotations

import logging
from typing import Any

from otel_spans.settings import ExportTarget

logger = logging.getLogger("otel_spans")

#: Most bytes of a collector's response body read, after decompression.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
#: Bytes asked of the decoder at a time: what one read may hold beyond the cap.
_CHUNK = 64 * 1024


class ResponseTooLarge(Exception):
    """A collector answered with more than :data:`MAX_RESPONSE_BYTES`: not read on.

    Raised out of the session, which the SDK's exporters take as a failed export
    that no retry will mend (it is no connection error).
    """


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
    except Exception as error:  # a body cut short or undecodable: what arrived
        logger.debug("otel-spans: reading a collector's answer: %r", error)
    return b"".join(chunks)


def _capped_body(response: Any, *args: Any, **kwargs: Any) -> Any:
    """A ``requests`` response hook: it runs before the body is read, so the body of
    an unstreamed response is read here, capped (a streamed one is its caller's)."""
    if kwargs.get("stream"):
        return response
    body = read_capped(response, MAX_RESPONSE_BYTES)
    if body is None:
        response.close()  # the rest is never read: the connection cannot be reused
        raise ResponseTooLarge(
            f"the collector's answer is over {MAX_RESPONSE_BYTES} bytes (decompressed): not read"
        )
    # What requests itself sets once it has read a body.
    response._content = body
    response._content_consumed = True
    return response


def http_session(target: ExportTarget) -> Any:
    """A ``requests`` session whose answers are capped, verifying against the
    configured CA if there is one.

    ``requests`` lets ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` replace the CA a session
    was given (they win over ``Session.verify``), so a configured ``certificate`` would
    be silently ignored wherever those are set, as on many CI images and corporate
    machines. With one, this session keeps the configured CA and still honours proxy
    variables.
    """
    import requests

    pinned = target.certificate is not None

    class OtlpSession(requests.Session):
        def __init__(self) -> None:
            super().__init__()
            self.hooks["response"].append(_capped_body)

        def merge_environment_settings(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            merged: dict[str, Any] = super().merge_environment_settings(*args, **kwargs)
            if pinned:
                merged["verify"] = self.verify
            return merged

    return OtlpSession()
