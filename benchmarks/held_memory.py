"""What otel-spans holds in the scheduler's memory, counted on the scheduler itself.

Run with ``client.run_on_scheduler(probe)`` by ``benchmarks.scale``. This module
imports nothing but the standard library, so that bringing it into the scheduler
process (it is pickled by reference) adds nothing to the RSS being measured.

Why not tracemalloc: tracing every allocation of a scheduler running a 200k-task graph
slows it several-fold and traces Dask's allocations too. Instead :func:`held_bytes`
walks the objects reachable from the plugin and sums ``sys.getsizeof`` of those that
are otel-spans' own: instances of classes defined in ``otel_spans`` and the builtin
containers and scalars they reach. It stops at everything else: Dask's objects
(scheduler, task states, task groups, spans), threads, locks, functions and
third-party objects. A reference to such an object costs its slot in the
container that holds it, not the object. Strings otel-spans shares with Dask (keys,
span ids) are counted, so the figure errs on the high side. Its cost is one visit per
held object, which is the point: it stays small when memory is O(groups + kept tasks)
and would grow with the task count if it were not.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import Any

_SCALARS = (str, bytes, int, float, complex, bool, type(None))
_OURS = "otel_spans"


def _fields(obj: object) -> list[object]:
    """Attribute values of an instance: its ``__dict__`` and its ``__slots__``."""
    values: list[object] = list(getattr(obj, "__dict__", {}).values())
    for cls in type(obj).__mro__:
        for name in cls.__dict__.get("__slots__", ()):
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                values.append(getattr(obj, name))
    return values


def held_bytes(root: object, foreign: set[int] | None = None) -> tuple[int, int]:
    """(bytes, objects) of otel-spans' own objects reachable from ``root``.

    ``foreign``: ids of objects never to count or enter, such as the scheduler's own
    containers that a part of otel-spans keeps a reference to (``scheduler.tasks``).
    Containers are copied before they are read (``list(d.items())`` runs in C without
    giving up the GIL), so an exporter thread changing one meanwhile does no harm.
    """
    seen: set[int] = set(foreign or ())
    stack: list[object] = [root]
    total = objects = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        children: list[Any]
        if isinstance(obj, _SCALARS):
            children = []
        elif isinstance(obj, dict):
            children = [item for pair in list(obj.items()) for item in pair]
        elif isinstance(obj, (list, tuple, set, frozenset, deque)):
            children = list(obj)
        elif type(obj).__module__.split(".")[0] == _OURS:
            children = _fields(obj)
            if hasattr(obj, "__dict__"):
                total += sys.getsizeof(obj.__dict__)  # not part of getsizeof(obj)
        else:
            continue  # not ours: Dask's, a thread, a lock, a function, a library's
        if isinstance(obj, tuple | list) and type(obj).__module__.split(".")[0] == _OURS:
            children += _fields(obj)  # a NamedTuple or list subclass of ours
        total += sys.getsizeof(obj)
        objects += 1
        stack.extend(children)
    return total, objects


def probe(dask_scheduler: Any = None) -> dict[str, Any]:
    """On the scheduler: otel-spans' held bytes and object count, its counters of the
    same moment, and how long the walk blocked the event loop (zeros without it)."""
    started = time.perf_counter()
    plugin = dask_scheduler.plugins.get("otel-spans") if dask_scheduler else None
    if plugin is None:
        return {"bytes": 0, "objects": 0, "stats": {}, "seconds": 0.0}
    # Dask's containers one level down from the scheduler and its extensions: a part of
    # ours that keeps ``scheduler.tasks`` at hand does not hold the tasks.
    owners = [dask_scheduler, *dask_scheduler.extensions.values()]
    foreign = {id(value) for owner in owners for value in getattr(owner, "__dict__", {}).values()}
    size, objects = held_bytes(plugin, foreign)
    seconds = time.perf_counter() - started
    return {"bytes": size, "objects": objects, "stats": plugin.stats(), "seconds": seconds}
