"""``dask_setup``/``dask_teardown``: the enable path through Dask preloads.

``distributed.scheduler.preload: [otel_spans]`` (or ``dask scheduler --preload
otel_spans``) imports the package and calls :func:`dask_setup` with the scheduler
before it starts.

Settings are resolved in the plugin's ``start``, not here: Dask logs and swallows
exceptions raised by a preload, but an exception from a plugin's ``start`` aborts the
scheduler's start. A bad value must stop the scheduler (with a
:class:`~otel_spans.config.ConfigError` naming the key), not leave it running
silently unobserved.
"""

from __future__ import annotations

import logging
from typing import Any

from otel_spans.config import register_defaults

logger = logging.getLogger("otel_spans")


def dask_setup(server: Any) -> None:
    """Install otel-spans on a Dask scheduler (a worker gets nothing yet)."""
    from distributed import Scheduler

    register_defaults()
    if isinstance(server, Scheduler):
        from otel_spans.plugin import OtelSpansPlugin

        server.add_plugin(OtelSpansPlugin(), idempotent=True)
    else:
        logger.debug("otel-spans: nothing to install on %s", type(server).__name__)


def dask_teardown(server: Any) -> None:
    """Nothing to undo: the scheduler plugin flushes in its own ``close``."""
