"""What a backend did with an export, and how a batch too large for it still gets through.

A collector answers an OTLP export in three ways beyond plain success and failure: it
may accept the request but reject some of its items (*partial success*, with a message
saying why), it may refuse the request for its size (gRPC ``RESOURCE_EXHAUSTED`` about
the message size, HTTP 413), and it may ask to be retried later. :class:`Sent` carries
the first two back from a sender; :func:`deliver` splits a batch that is too large in
halves, down to one record, so that everything that can get through does, and counts
what cannot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

#: Largest request otel-spans sends: gRPC's default maximum message size (4 MiB), which
#: collectors and gRPC servers keep unless configured otherwise. Larger batches are
#: split before they are sent.
MAX_REQUEST_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Sent:
    """What the backend did with one request."""

    ok: bool
    #: Items (spans, log records) the backend's partial success says it rejected.
    rejected: int = 0
    #: Refused for its size: split it and send the halves.
    too_large: bool = False

    def __bool__(self) -> bool:
        return self.ok


ACCEPTED = Sent(True)
REFUSED = Sent(False)


@dataclass(frozen=True)
class Delivery:
    """What became of one batch of records (``rejected`` counts the backend's items)."""

    exported: int
    failed: int = 0
    rejected: int = 0
    too_large: int = 0

    def __add__(self, other: Delivery) -> Delivery:
        return Delivery(
            self.exported + other.exported,
            self.failed + other.failed,
            self.rejected + other.rejected,
            self.too_large + other.too_large,
        )


def deliver(
    records: Sequence[T],
    encode: Callable[[Sequence[T]], bytes],
    send: Callable[[bytes], Sent],
    max_bytes: int = MAX_REQUEST_BYTES,
) -> Delivery:
    """Send ``records`` as one request, or as halves (recursively) while the request is
    larger than ``max_bytes`` or the backend refuses it for its size. A single record
    that is still too large is dropped and counted in ``too_large``."""
    if not records:
        return Delivery(0)
    body = encode(records)
    if len(body) <= max_bytes:
        sent = send(body)
        if not sent.too_large:
            n = len(records)
            return Delivery(n, 0, sent.rejected) if sent.ok else Delivery(0, n, sent.rejected)
    if len(records) == 1:
        return Delivery(0, too_large=1)
    middle = len(records) // 2
    return deliver(records[:middle], encode, send, max_bytes) + deliver(
        records[middle:], encode, send, max_bytes
    )
