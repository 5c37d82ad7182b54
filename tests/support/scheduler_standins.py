"""Stand-ins for the scheduler's objects that ``scheduler/task_groups.py`` reads, for
tests that drive the task groups' bookkeeping without a cluster.

Only the attributes the module reads are here; a ``TaskGroup`` is hashable by identity,
as Dask's is.
"""

from __future__ import annotations

from typing import Any

from otel_spans.scheduler.sampling import Policy
from otel_spans.scheduler.task_groups import SpanIdentity, TaskGroups


class Named:
    """A ``TaskPrefix``."""

    def __init__(self, name: str):
        self.name = name


class Group:
    """A ``TaskGroup``: hashable by identity, as Dask's."""

    def __init__(self, name: str, tasks: int):
        self.name = name
        self.prefix = Named(name)
        self.dependencies: set[Group] = set()
        self.start, self.stop = 1.0, 2.0
        self.nbytes_total = 0
        self.all_durations: dict[str, float] = {}
        self._tasks = tasks

    def __len__(self) -> int:
        return self._tasks


class Task:
    """A scheduler ``TaskState``."""

    def __init__(self, key: str, group: Group, dependencies: tuple[Task, ...] = ()):
        self.key = key
        self.group = group
        self.prefix = group.prefix
        self.dependencies = set(dependencies)


class Scheduler:
    """A ``Scheduler``: its recent computations (none) and the story of every key."""

    def __init__(self, story: tuple[tuple[Any, ...], ...] = ()):
        self.computations: list[Any] = []
        self._story = list(story)

    def story(self, key: Any) -> list[tuple[Any, ...]]:
        return self._story


def groups(scheduler: Scheduler, submitted: list[object]) -> TaskGroups:
    """Task groups that hand what they export to ``submitted``."""
    return TaskGroups(
        scheduler,  # type: ignore[arg-type]
        submit=submitted.append,
        log=None,
        max_error_stories=10,
        max_length=4096,
    )


def identity(mode: str) -> SpanIdentity:
    """A tracked Dask span whose task spans follow ``traces.tasks.mode`` ``mode``."""
    return SpanIdentity("uuid-1", ("work",), 7, 8, Policy(mode=mode))  # type: ignore[arg-type]


def finished(worker: str) -> dict[str, Any]:
    """The transition kwargs of a run on ``worker`` that computed for one second."""
    return {"worker": worker, "startstops": [{"action": "compute", "start": 1.0, "stop": 2.0}]}
