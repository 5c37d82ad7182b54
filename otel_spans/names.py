"""Names from user code made valid UTF-8 and bounded, once, where they enter otel-spans.

Dask span names, task keys, prefixes, group names, worker addresses and workflow
attribute values are user input. In one process (``LocalCluster(processes=False)``) a
name reaches the scheduler as the client's own ``str``: it may hold lone surrogates,
which no UTF-8 encoder accepts (the OTel SDK's metric encoder logs a traceback and
drops the label at every export; a page fails to write), and it may be megabytes long
(every record and page that repeats it would be too). The scheduler side passes each
name through :func:`clean` when it first reads it from a Dask object, so spans,
metric labels, logs, the workflows page and the report all see the same text.

Control characters are valid UTF-8 and stay: OTLP and Prometheus carry them, and only
a page needs them shown (:func:`otel_spans.markup.escape` draws their pictures).
"""

from __future__ import annotations

#: Longest metric attribute value (characters): a label names a series, and Prometheus
#: and its peers index every label value. The workflows page cuts names to it too, so
#: the page's name of a workflow is its ``dask.span.name`` series'.
LABEL_LENGTH = 256


def clean(value: str, limit: int | None = None) -> str:
    """``value`` encodable as UTF-8 and cut to ``limit`` characters (no cut when None).

    Each lone surrogate becomes U+FFFD; a surrogate pair held as two code points
    becomes the one character it encodes. Applying it again, with the same or a
    shorter limit, gives what one application with that limit gives. Text already
    valid and short enough is returned as it is, for a length check and
    ``str.isascii`` (O(1)); a megabyte name costs O(``limit``), not O(megabyte).
    """
    if limit is not None and len(value) > limit:
        if value.isascii():
            return value[:limit]
        # A pair held as two code points becomes one character: keep enough to fill
        # ``limit`` after that, and one more, so that a pair split by this cut lands
        # past ``limit``.
        return _valid(value[: 2 * limit + 2])[:limit]
    return value if value.isascii() else _valid(value)


def _valid(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # UTF-16 pairs what forms a pair; its decoder replaces each lone one.
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value
