"""Time slices: how periodic work on the scheduler's event loop stays short.

The trace poll and the metrics read can have thousands of spans to look at (a
workflow of 1,000 sub-spans finishing at once). Each stops after :data:`LOOP_BUDGET`
and goes on in a fresh loop iteration through a :class:`Resume`, so that the
scheduler's own work runs in between; shutdown's final pass has no budget.
"""

from __future__ import annotations

from collections.abc import Callable

from tornado.ioloop import IOLoop

#: Seconds one slice may hold the event loop.
LOOP_BUDGET = 0.005


class Resume:
    """Calls ``callback`` in the next loop iteration, once however often it is asked."""

    def __init__(self, callback: Callable[[], None]):
        self.callback = callback
        self._pending = False

    def soon(self) -> None:
        if not self._pending:
            self._pending = True
            IOLoop.current().add_callback(self._run)

    def _run(self) -> None:
        self._pending = False
        self.callback()
