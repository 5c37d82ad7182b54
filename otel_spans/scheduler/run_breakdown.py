"""A Dask span's own fine performance metrics as its run-breakdown attributes.

Each export carries ``dask.span.run.*`` attributes: its span's own ``execute`` metrics
(``Span._cumulative_worker_metrics``) by unit and activity, and on a root the tree's
idle share; a continuation carries only what grew since the earlier exports. On the
scheduler's event loop, once per export: the few keys of a span's prefixes are read
again by every export, so their attribute keys are remembered.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Mapping
from typing import Any

from otel_spans import semconv


def run_totals(own: Mapping[Any, float], idle: float | None) -> dict[str, float]:
    """A span's own worker metrics so far, as run-breakdown attribute keys.

    ``own`` is ``Span._cumulative_worker_metrics`` (the span's own share, not its
    subtree's); ``idle``, for a root, its tree's "idle or other spans" seconds.
    O(the span's own metric keys).
    """
    totals: dict[str, float] = {}
    names = _run_names
    for key, value in list(own.items()):
        name = names.get(key, _UNSEEN)
        if name is _UNSEEN:
            name = _run_key_name(key)
        if name is not None:
            totals[name] = totals.get(name, 0.0) + value
    if idle is not None:
        totals[_IDLE_NAME] = idle
    return totals


#: The run-breakdown attribute key of a root's tree's idle share.
_IDLE_NAME = semconv.DASK_SPAN_RUN_TIME_PREFIX + semconv.key_part(semconv.IDLE_ACTIVITY)


#: Worker metric key -> its run-breakdown attribute key (None: not counted), for
#: :func:`run_totals`: every export reads the same few keys of its prefixes again.
#: Cleared when full; only keys of plain strings (which no other key equals).
_run_names: dict[Hashable, str | None] = {}
_MAX_RUN_NAMES = 4_096
_UNSEEN = "\0unseen"


def _run_key_name(key: Hashable) -> str | None:
    """The run-breakdown attribute key of a worker metric key, remembered."""
    name = None
    if isinstance(key, tuple) and len(key) == 4 and key[0] == "execute":
        name = _run_name(str(key[3]), str(key[2]))
    if type(key) is tuple and all(type(part) is str for part in key):
        if len(_run_names) >= _MAX_RUN_NAMES:
            _run_names.clear()
        _run_names[key] = name
    return name


@functools.lru_cache(maxsize=1024)
def _run_name(unit: str, activity: str) -> str | None:
    """The run-breakdown attribute key of an ``execute`` metric's unit and activity;
    None for a unit it does not count. Remembered: every export reads the same few
    activities again, and each key part is built character by character."""
    prefix = semconv.DASK_SPAN_RUN_PREFIXES.get(unit)
    return None if prefix is None else prefix + semconv.key_part(activity)


def run_shares(
    totals: Mapping[str, float], exported: Mapping[str, float]
) -> tuple[tuple[str, float], ...]:
    """This export's share of :func:`run_totals`: what grew since the ``exported`` totals
    of the earlier exports, so that a continuation carries only its own run."""
    out = []
    for name, total in totals.items():
        share = total - exported.get(name, 0.0)
        if share > 0:
            out.append((name, share))
    return tuple(sorted(out))
