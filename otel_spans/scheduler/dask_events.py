"""Dask's structured events (``Scheduler.log_event``) as OTel log entries.

Worker losses also feed the task groups: the results a dead worker held are computed
again, and that run is kept as recomputed (the tasks it was running are counted by the
transition hook, as every run abandoned while processing).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from distributed.metrics import time

from otel_spans import semconv
from otel_spans.config import Settings
from otel_spans.records import AttrValue, LogEntry, log_entry, ns
from otel_spans.scheduler.snapshots import EXCEPTION_FIELDS, span_uuid_of_key
from otel_spans.scheduler.span_state import SpanIdentity
from otel_spans.scheduler.task_groups import TaskGroups

if TYPE_CHECKING:
    from distributed import Scheduler

#: Most event topics whose log decision is remembered.
_MAX_TOPICS = 1000
#: Most recent worker removals remembered (to handle each once).
_MAX_REMOVALS = 1000
#: Actions Dask logs twice, as two messages: under a worker's or client's own topic and
#: under "all" (``Scheduler.add_worker``, ``remove_worker``, ``restart_workers``).
#: Exported once, under "all"; every other per-worker event is logged only there.
_ALSO_UNDER_ALL = frozenset({"add-worker", "remove-worker", "restart-workers"})
_INFO = semconv.SEVERITY_INFO
#: Trace id, span id and sampling decision of an event that names no tracked span.
_NO_CONTEXT = (0, 0, False)


def _matches(topic: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(str(topic), pattern) for pattern in patterns)


class DaskEvents:
    """Turns the events Dask logs into log entries; see :meth:`log_event`.

    ``identity`` gives the tracked Dask span of a uuid (None if untracked), so that an
    event naming a task key or a span carries that span's trace and span ids.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        settings: Settings,
        submit: Callable[[LogEntry], object],
        identity: Callable[[str], SpanIdentity | None],
        task_groups: TaskGroups | None,
    ):
        self._scheduler = scheduler
        self._settings = settings
        self._submit = submit
        self._identity = identity
        self._task_groups = task_groups
        #: Event topic -> whether its events become log records (bounded).
        self._topic_logged: dict[Any, bool] = {}
        #: Recent worker removals already handled (insertion-ordered, bounded).
        self._removals: dict[tuple[Any, Any], None] = {}
        #: (topic, action) -> the attributes of its records, () for a topic not logged
        #: (bounded as topics are).
        self._topic_attributes: dict[tuple[Any, Any], tuple[tuple[str, AttrValue], ...]] = {}
        #: The last event message that became a log record.
        self._last_logged: object = None
        #: A record's body is a copy of the event without its exception texts, unless
        #: they may be captured.
        self._drop_exceptions = settings.capture.exceptions == "type"

    def clear(self) -> None:
        self._topic_logged.clear()
        self._topic_attributes.clear()
        self._removals.clear()
        self._last_logged = None

    def log_event(self, topic: str, msg: Any) -> None:
        is_dict = isinstance(msg, dict)
        action = msg.get("action") if is_dict else None
        if action == "remove-worker" and self._task_groups is not None:
            # Logged under the worker's topic and under "all": count each removal once.
            removal = (msg.get("stimulus_id"), msg.get("worker", topic))
            if removal not in self._removals:
                self._removals[removal] = None
                if len(self._removals) > _MAX_REMOVALS:
                    del self._removals[next(iter(self._removals))]
                # Its processing tasks are counted as they leave processing (the
                # transition hook), like every other abandoned run.
                self._task_groups.lost(msg.get("lost-computed-tasks") or ())
        if isinstance(action, str) and action in _ALSO_UNDER_ALL and topic != "all":
            return
        # Dask publishes one message under several topics at once (update-graph under
        # "scheduler" and the client's id): one record, under the first. Checked first,
        # as it returns either way.
        if is_dict and msg is self._last_logged:
            return
        # An action may be any value: only None and strings are remembered.
        memo = action is None or type(action) is str
        attributes = self._topic_attributes.get((topic, action)) if memo else None
        if attributes is None:
            attributes = self._attributes(topic, action, memo)
        if not attributes:  # its topic is not logged
            return
        trace_id, span_id, sampled = _NO_CONTEXT
        body = msg
        if is_dict:
            self._last_logged = msg
            key, uuid = msg.get("key"), msg.get("span_id")
            if key is not None or uuid is not None:  # most events name neither
                trace_id, span_id, sampled = self._context(key, uuid)
            body = (
                {k: v for k, v in msg.items() if k not in EXCEPTION_FIELDS}
                if self._drop_exceptions
                else dict(msg)
            )
        self._submit(
            log_entry(
                (
                    ns(time()),
                    _INFO.number,
                    _INFO.text,
                    body,
                    attributes,
                    semconv.LOG_DASK_EVENT,
                    trace_id,
                    span_id,
                    "",
                    0,
                    sampled,
                )
            )
        )

    def _attributes(self, topic: Any, action: Any, memo: bool) -> tuple[tuple[str, AttrValue], ...]:
        """An event's topic and action as its record's attributes, () when events of
        its topic are not logged; remembered per (topic, action) when ``memo``, since a
        busy scheduler logs them again and again (one lookup decides and names the
        record: :meth:`log_event` looks there first)."""
        attributes: tuple[tuple[str, AttrValue], ...] = ()
        if self._logged(topic):
            attributes = ((semconv.DASK_EVENT_TOPIC, str(topic)),)
            if action is not None:
                attributes += ((semconv.DASK_EVENT_ACTION, str(action)),)
        if memo:
            if len(self._topic_attributes) >= _MAX_TOPICS:  # as topics below
                self._topic_attributes.clear()
            self._topic_attributes[topic, action] = attributes
        return attributes

    def _logged(self, topic: Any) -> bool:
        """Whether events of ``topic`` become log records; remembered per topic, since a
        busy scheduler logs an event per client call and the globs cost µs each."""
        known = self._topic_logged.get(topic)
        if known is None:
            logs = self._settings.logs
            known = (
                logs.target.enabled
                and _matches(topic, logs.topics)
                and not _matches(topic, logs.exclude_topics)
            )
            if len(self._topic_logged) >= _MAX_TOPICS:  # per-worker topics come and go
                self._topic_logged.clear()
            self._topic_logged[topic] = known
        return known

    def _context(self, key: Any, uuid: Any) -> tuple[int, int, bool]:
        """Trace and span ids, and the trace's sampling decision, for an event that
        names a task ``key`` or a Dask span ``uuid``; else 0s."""
        identity = self._identity_of_key(key)
        if identity is None and isinstance(uuid, str):
            identity = self._identity(uuid)
        if identity is None:
            return _NO_CONTEXT
        return identity.trace_id, identity.otel_span_id, identity.sampled

    def about(self, value: object) -> tuple[int, int, bool] | None:
        """The trace and span ids of the Dask span a task key or span id names, if
        tracked, and whether its trace is sampled.

        For Python log records, from whichever thread logged: dict lookups only.
        """
        identity = self._identity_of_key(value)
        if identity is None and isinstance(value, str):
            identity = self._identity(value)
        if identity is None:
            return None
        return identity.trace_id, identity.otel_span_id, identity.sampled

    def _identity_of_key(self, key: Any) -> SpanIdentity | None:
        uuid = span_uuid_of_key(self._scheduler, key) if key is not None else None
        return self._identity(uuid) if uuid is not None else None
