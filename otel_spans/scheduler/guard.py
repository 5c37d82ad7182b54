"""How a copy of the scheduler plugin protects the scheduler from itself.

Two things distributed does not do for a plugin: tell it that it was unregistered or
that its scheduler was stopped without ``close()`` (:func:`orphaned`), and stop calling
a hook that fails on every task (:class:`ErrorBudget`). Both are checked on the event
loop, in O(1) (``orphaned`` in O(plugins)).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from distributed.core import Status

if TYPE_CHECKING:
    from distributed import Scheduler

#: How often a running copy checks that it is still the scheduler's plugin and that
#: the scheduler still runs; it stops everything it started within about this long
#: after being unregistered, replaced behind its back, or ``Scheduler.stop()``.
WATCH_INTERVAL = 1.0
#: This many internal errors within ``ERROR_WINDOW`` seconds switch the plugin's
#: per-task hooks off for the rest of its copy's life.
ERROR_BUDGET = 100
ERROR_WINDOW = 60.0


def orphaned(plugin: object, scheduler: Scheduler) -> str | None:
    """Why ``plugin`` should close itself now, or None while its scheduler runs it."""
    if not any(p is plugin for p in scheduler.plugins.values()):
        return "it was unregistered or replaced"
    # Server.stop() records it only in a private, name-mangled flag (the status stays
    # "running"); without that flag, only the status tells.
    if getattr(scheduler, "_Server__stopped", False):
        return "the scheduler was stopped without close()"
    if scheduler.status in (Status.closed, Status.failed):
        return "the scheduler is closed"
    return None


class ErrorBudget:
    """Counts internal errors; exhausted once ``budget`` of them fall in ``window`` s.

    A bug that repeats would otherwise cost an exception on every transition for the
    scheduler's life. Exhaustion is final: a fresh copy of the plugin starts afresh.
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
