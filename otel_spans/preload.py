"""``dask_setup``/``dask_teardown``: the enable path through Dask preloads.

``distributed.scheduler.preload: [otel_spans]`` (or ``dask scheduler --preload
otel_spans``) imports the package and calls :func:`dask_setup` with the scheduler
before it starts. ``distributed.worker.preload: [otel_spans]`` (or ``dask worker
--preload otel_spans``) installs the worker plugin (:mod:`otel_spans.worker`); a
Nanny's preload forwards it to the worker process the Nanny starts.

Settings are resolved in the plugin's ``start``, not here: Dask logs and swallows
exceptions raised by a preload, but an exception from a plugin's ``start`` aborts the
scheduler's start. A bad value must stop the scheduler (with a
:class:`~otel_spans.config.ConfigError` naming the key), not leave it running
silently unobserved.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

from otel_spans.config import register_defaults

logger = logging.getLogger("otel_spans")


def dask_setup(server: Any) -> Awaitable[Any] | None:
    """Install otel-spans on a Dask scheduler, worker or nanny."""
    from distributed import Scheduler

    register_defaults()
    if isinstance(server, Scheduler):
        from otel_spans.scheduler.plugin import OtelSpansPlugin

        server.add_plugin(OtelSpansPlugin(), idempotent=True)
        return None
    from otel_spans.worker.plugin import setup_server

    # A Worker's plugin_add coroutine, awaited by Dask's preload machinery.
    return setup_server(server)


def dask_teardown(server: Any) -> None:
    """Nothing to undo: the plugins flush in their own ``close``/``teardown``."""
