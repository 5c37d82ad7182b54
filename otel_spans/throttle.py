"""Rate-limited logging for failures that repeat.

A collector that is down fails every batch, a full queue drops every record, and a bug
of ours in a hook would fire on every transition: each is worth one line in the log,
not thousands. Every such message in otel-spans goes through one :class:`Throttle`.
"""

from __future__ import annotations

import logging
import math
import time

logger = logging.getLogger("otel_spans")


class Throttle:
    """Logs at most one message per ``every`` seconds and counts the ones it held back.

    Not thread-safe by design: each throttle belongs to one thread (the event loop, or
    one exporter thread); a race can only let one extra line through.
    """

    def __init__(self, every: float):
        self.every = every
        self._last = -math.inf
        #: Messages held back since the last one logged.
        self._held = 0

    def log(self, level: int, message: str, *args: object, exc_info: bool = False) -> bool:
        """Log ``message % args`` unless one was logged less than ``every`` seconds ago.

        Returns whether it was logged. A logged message says how many were held back
        before it, so the log still tells how often the failure happened.
        """
        now = time.monotonic()
        if now - self._last < self.every:
            self._held += 1
            return False
        suffix = f" ({self._held} more since the last one)" if self._held else ""
        self._last, self._held = now, 0
        logger.log(level, message + suffix, *args, exc_info=exc_info)
        return True
