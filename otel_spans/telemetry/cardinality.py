"""A budget on distinct attribute values, so one tag with a uuid in it cannot flood Prometheus."""

from __future__ import annotations

import threading

from otel_spans.semconv import OVERFLOW_VALUE

#: Most replaced values a budget remembers (oldest forgotten first, counted in
#: ``forgotten``): each is counted once in ``overflowed`` while remembered.
MAX_REPLACED = 10_000


class CardinalityLimiter:
    """Admits the first ``limit`` distinct values; later ones become ``OVERFLOW_VALUE``.

    First come, first kept: a value once admitted stays admitted, so a series never
    changes its labels halfway through a workflow. Thread-safe.

    ``overflowed`` counts distinct values replaced, not replacements: a value is asked
    for once per delta and per attribute it fills (a span's name and its root share this
    budget), and a count of calls would grow with the metrics interval instead of with
    the values lost. Replaced values are remembered up to ``MAX_REPLACED``; one
    forgotten there (``forgotten``) counts again if it comes back.
    """

    def __init__(self, limit: int, overflow_value: str = OVERFLOW_VALUE):
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self.overflow_value = overflow_value
        self._admitted: set[str] = set()
        self._lock = threading.Lock()
        #: Values replaced by the overflow value (insertion-ordered, bounded).
        self._replaced: dict[str, None] = {}
        #: Distinct values replaced by the overflow value (see the class docstring).
        self.overflowed = 0
        #: Replaced values forgotten at ``MAX_REPLACED``.
        self.forgotten = 0

    def __call__(self, value: str) -> str:
        if value in self._admitted:  # the hot path: no lock for known values
            return value
        with self._lock:
            if value in self._admitted:
                return value
            if len(self._admitted) < self.limit:
                self._admitted.add(value)
                return value
            if value not in self._replaced:
                self._replaced[value] = None
                self.overflowed += 1
                if len(self._replaced) > MAX_REPLACED:
                    del self._replaced[next(iter(self._replaced))]
                    self.forgotten += 1
            return self.overflow_value

    def __len__(self) -> int:
        return len(self._admitted)
