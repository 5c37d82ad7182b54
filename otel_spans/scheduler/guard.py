"""How a copy of the scheduler plugin protects the scheduler from itself.

Two things distributed does not do for a plugin: tell it that it was unregistered or
that its scheduler was stopped without ``close()`` (:func:`orphaned`), and stop calling
a hook that fails on every task (:class:`~otel_spans.error_budget.ErrorBudget`). Both
are checked on the event loop, in O(1) (``orphaned`` in O(plugins)).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distributed.core import Status

if TYPE_CHECKING:
    from distributed import Scheduler

#: How often a running copy checks that it is still the scheduler's plugin and that
#: the scheduler still runs; it stops everything it started within about this long
#: after being unregistered, replaced behind its back, or ``Scheduler.stop()``.
WATCH_INTERVAL = 1.0


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
