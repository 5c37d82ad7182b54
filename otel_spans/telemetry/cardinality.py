"""A budget on distinct attribute values, so one tag with a uuid in it cannot flood Prometheus."""

from __future__ import annotations

import threading

from otel_spans.semconv import OVERFLOW_VALUE


class CardinalityLimiter:
    """Admits the first ``limit`` distinct values; later ones become ``OVERFLOW_VALUE``.

    First come, first kept: a value once admitted stays admitted, so a series never
    changes its labels halfway through a workflow. Thread-safe.
    """

    def __init__(self, limit: int, overflow_value: str = OVERFLOW_VALUE):
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self.overflow_value = overflow_value
        self._admitted: set[str] = set()
        self._lock = threading.Lock()
        #: How many times a value was replaced by the overflow value.
        self.overflowed = 0

    def __call__(self, value: str) -> str:
        if value in self._admitted:  # the hot path: no lock for known values
            return value
        with self._lock:
            if value in self._admitted:
                return value
            if len(self._admitted) < self.limit:
                self._admitted.add(value)
                return value
            self.overflowed += 1
            return self.overflow_value

    def __len__(self) -> int:
        return len(self._admitted)
