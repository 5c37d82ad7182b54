"""When otel-spans stops trying: a bug of ours that repeats must not cost Dask an
exception on every task for a process's life.

Shared by the scheduler plugin (its transition, update-graph and event hooks) and the
worker plugin (its wrapper around task execution); Dask-free.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

#: This many internal errors within ``ERROR_WINDOW`` seconds switch a plugin's
#: per-task hooks off for the rest of its copy's life.
ERROR_BUDGET = 100
ERROR_WINDOW = 60.0


class ErrorBudget:
    """Counts internal errors; exhausted once ``budget`` of them fall in ``window`` s.

    Exhaustion is final: a fresh copy of the plugin starts afresh.
    """

    def __init__(
        self,
        budget: int = ERROR_BUDGET,
        window: float = ERROR_WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.budget = budget
        self.window = window
        self._clock = clock
        #: Times of the latest errors: at most ``budget``, oldest evicted.
        self._recent: deque[float] = deque(maxlen=budget)
        #: Set once, never cleared.
        self.exhausted = False

    def spend(self) -> bool:
        """Count one error; True exactly once, for the error that exhausts the budget."""
        if self.exhausted:
            return False
        now = self._clock()
        recent = self._recent
        recent.append(now)
        if len(recent) < self.budget or now - recent[0] > self.window:
            return False
        self.exhausted = True
        return True
