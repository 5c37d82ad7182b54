"""What each of Dask's task states means to the transition hook.

Dask calls a scheduler plugin's ``transition`` for every task about four times; the
hook follows only the transitions these sets name and returns at once on the others
(:meth:`~otel_spans.scheduler.plugin.OtelSpansPlugin.transition`,
:meth:`~otel_spans.scheduler.tracking.SpanTracker.transition`). Dask's transitions are
listed in ``SchedulerState._TRANSITIONS_TABLE``; one that goes through ``released``
reaches plugins as ``released → finish``.
"""

from __future__ import annotations

#: A task entering one of these states has a run ahead: its span has work to do again.
#: (``processing`` is entered from one of them only, so it is not followed.)
ACTIVE_STATES = frozenset({"waiting", "queued", "no-worker"})
#: Final states counted per span and prefix as tasks reach them. Dask's own per-group
#: state counts forget an erred task as soon as the client releases it; these do not.
FINAL_STATES = frozenset({"memory", "erred"})
#: Transitions after which a span may have become done: the poll re-checks it.
_SETTLING_STATES = FINAL_STATES | {"released"}
#: Transitions the hook follows; any other returns at once (a task leaving memory
#: for another state is followed too: it held bytes).
WATCHED_STATES = ACTIVE_STATES | _SETTLING_STATES
#: States a task leaving for ``released`` ended a run from without a result kept: a
#: lost worker, ``Reschedule``, a retry, a stale run (processing), ``Client.retry``
#: (erred). Its next run, if any, is one more attempt.
RUN_ENDED_STATES = frozenset({"processing", "erred"})
