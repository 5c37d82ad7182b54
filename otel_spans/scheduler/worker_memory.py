"""Workers' memory: pauses and losses charged to Dask spans, kills explained, gauges.

On the scheduler's event loop, from events Dask already sends (``log_event``) and the
metrics pass; nothing here runs per task:

* ``worker-status-change`` to ``paused``: every span and task group with tasks
  processing on that worker gets a pause, which lasts until the worker runs again or
  is removed (O(tasks processing on the worker), once per pause);
* ``remove-worker`` not expected (a worker died, was killed by its nanny for memory,
  or stopped answering): the spans and groups it was running or holding tasks of count
  a lost worker, and one ``dask.worker.lost`` log record and span event per span name
  the tasks it was running, their groups and spans, those that ended in
  ``KilledWorker``, the bytes it held and its last reported memory (its last
  heartbeat, read from the ``WorkerState`` Dask no longer lists by then);
* :meth:`WorkerMemory.gauges`: each worker's managed, unmanaged and spilled bytes and
  the cluster's sums, O(workers) once per metrics pass.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from typing import TYPE_CHECKING, Any

from distributed.metrics import time

from otel_spans import semconv
from otel_spans.names import clean
from otel_spans.records import AttrValue, GaugeValue, LogEntry, SpanEventRecord, ns
from otel_spans.scheduler import memory
from otel_spans.scheduler.span_state import TrackedSpan

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.scheduler import TaskState, WorkerState

#: Most task keys (and groups, spans) named on one lost-worker record.
MAX_NAMED = 32
#: Most workers whose nanny's ``worker-restart-memory`` event is remembered.
_MAX_RESTARTS = 1000
#: Statuses of a worker closing itself (``Worker.close``, retirement).
_CLOSING = frozenset({"closing", "closing_gracefully", "closed"})


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


class WorkerMemory:
    """Worker pauses, losses and memory (see the module docstring).

    ``track`` gives the tracked span of a Dask span uuid (None if untracked), without
    reopening it.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        track: Callable[[str], TrackedSpan | None],
        submit_log: Callable[[LogEntry], object] | None,
        max_length: int,
    ):
        self._scheduler = scheduler
        self._track = track
        self._submit_log = submit_log
        self._max_length = max_length
        #: Every worker seen, so that a removed one's last heartbeat can still be read.
        self._workers: dict[str, WorkerState] = dict(scheduler.workers)
        #: Paused workers -> the ledgers of the spans whose tasks the pause overlapped.
        self._paused: dict[str, list[memory.SpanMemory]] = {}
        #: Worker -> the process memory its nanny killed it at (``worker-restart-memory``).
        self._restarts: dict[str, int] = {}
        #: Workers that said they are closing (``Worker.close``): their removal loses
        #: nothing unless they still ran or held work.
        self._closing: set[str] = set()
        #: Workers lost unexpectedly, and pauses seen (for ``stats()``).
        self.lost = 0
        self.pauses = 0

    def clear(self) -> None:
        self._workers.clear()
        self._paused.clear()
        self._restarts.clear()
        self._closing.clear()

    def add_worker(self, address: str) -> None:
        ws = self._scheduler.workers.get(address)
        if ws is not None:
            self._workers[address] = ws

    # -- events ------------------------------------------------------------------------
    def log_event(self, topic: str, msg: Any) -> None:
        if not isinstance(msg, dict):
            return
        action = msg.get("action")
        if action == "worker-status-change":
            self._status_changed(str(topic), msg.get("status"))
        elif action == "remove-worker" and topic == "all":  # once, not also per worker
            self._removed(str(msg.get("worker", "")), msg)
        elif topic == "worker-restart-memory" and "worker" in msg:
            self._restarts[str(msg["worker"])] = _int(msg.get("rss"))
            if len(self._restarts) > _MAX_RESTARTS:
                del self._restarts[next(iter(self._restarts))]

    def _status_changed(self, address: str, status: object) -> None:
        now = time()
        if status in _CLOSING and address in self._workers:
            self._closing.add(address)
        if status != "paused":
            for ledger in self._paused.pop(address, ()):
                memory.resumed(ledger, address, now)
            return
        ws = self._scheduler.workers.get(address)
        if ws is None or address in self._paused:
            return
        self.pauses += 1
        by_span: dict[str, tuple[memory.SpanMemory, set[str]]] = {}
        for ts in list(ws.processing):
            found = self._span_of(ts)
            if found is None:
                continue
            _, track = found
            entry = by_span.setdefault(track.identity.uuid, (track.memory, set()))
            entry[1].add(ts.group.name)
        ledgers = []
        for ledger, groups in by_span.values():
            memory.paused(ledger, address, tuple(sorted(groups)), now)
            ledgers.append(ledger)
        self._paused[address] = ledgers

    def _span_of(self, ts: TaskState) -> tuple[str, TrackedSpan] | None:
        group = ts.group
        uuid = group.span_id if group is not None else None
        track = self._track(uuid) if uuid else None
        return (uuid, track) if uuid and track is not None else None

    def _removed(self, address: str, msg: dict[str, Any]) -> None:
        now = time()
        for ledger in self._paused.pop(address, ()):
            memory.resumed(ledger, address, now)
        ws = self._workers.pop(address, None)
        rss = self._restarts.pop(address, None)
        closing = address in self._closing
        self._closing.discard(address)
        if msg.get("expected"):
            return  # retired: nothing was lost
        running = self._tasks(msg.get("processing-tasks"))
        held = self._tasks(msg.get("lost-computed-tasks"))
        if closing and not running and not held:
            return  # closed itself with nothing to lose (a cluster shutting down)
        self.lost += 1
        # every span and group that lost work there, running or held
        touched: dict[str, tuple[TrackedSpan, set[str]]] = {}
        for ts in (*running, *held):
            found = self._span_of(ts)
            if found is not None:
                touched.setdefault(found[0], (found[1], set()))[1].add(ts.group.name)
        for track, groups in touched.values():
            memory.lost(track.memory, tuple(sorted(groups)))
        attrs = self._worker_attributes(address, ws, rss)
        by_span: dict[str, list[TaskState]] = {}
        for ts in running:
            found = self._span_of(ts)
            if found is not None:
                by_span.setdefault(found[0], []).append(ts)
        for uuid, tasks in by_span.items():
            track = touched[uuid][0]
            event_attrs = attrs + self._task_attributes(tasks, {uuid: track})
            track.memory.add_lost_event(
                SpanEventRecord(semconv.EVENT_WORKER_LOST, ns(now), event_attrs)
            )
        if self._submit_log is not None:
            self._submit_log(self._log(address, now, running, attrs, rss, ws))

    def _tasks(self, keys: object) -> list[TaskState]:
        if not isinstance(keys, set | list | tuple | frozenset):
            return []
        tasks = self._scheduler.tasks
        out = []
        for key in sorted(keys, key=str):
            try:
                ts = tasks.get(key)
            except TypeError:
                continue
            if ts is not None:
                out.append(ts)
        return out

    def _worker_attributes(
        self, address: str, ws: WorkerState | None, rss: int | None
    ) -> tuple[tuple[str, AttrValue], ...]:
        attrs: list[tuple[str, AttrValue]] = [
            (semconv.DASK_WORKER_ADDRESS, clean(address, self._max_length))
        ]
        if ws is not None:
            metrics = ws.metrics if isinstance(ws.metrics, dict) else {}
            spilled = metrics.get("spilled_bytes")
            attrs.append((semconv.DASK_WORKER_LOST_HELD, _int(metrics.get("managed_bytes"))))
            attrs.append((semconv.DASK_WORKER_LOST_PROCESS_MEMORY, _int(metrics.get("memory"))))
            if isinstance(spilled, dict):
                attrs.append((semconv.DASK_WORKER_LOST_SPILLED, _int(spilled.get("disk"))))
            if ws.memory_limit:
                attrs.append((semconv.DASK_WORKER_LOST_MEMORY_LIMIT, _int(ws.memory_limit)))
        if rss:  # the nanny's own reading when it killed the worker: the freshest
            attrs = [a for a in attrs if a[0] != semconv.DASK_WORKER_LOST_PROCESS_MEMORY]
            attrs.append((semconv.DASK_WORKER_LOST_PROCESS_MEMORY, rss))
        return tuple(attrs)

    def _task_attributes(
        self, tasks: list[TaskState], tracks: dict[str, TrackedSpan]
    ) -> tuple[tuple[str, AttrValue], ...]:
        limit = self._max_length
        named = tasks[:MAX_NAMED]
        groups = sorted({clean(str(ts.group.name), limit) for ts in named})
        spans = sorted({"/".join(t.identity.tags) for t in tracks.values()})
        killed = [clean(str(ts.key), limit) for ts in named if ts.state == "erred"]
        out: list[tuple[str, AttrValue]] = [
            (semconv.DASK_WORKER_LOST_TASKS, tuple(clean(str(ts.key), limit) for ts in named)),
            (semconv.DASK_WORKER_LOST_GROUPS, tuple(groups)),
            (semconv.DASK_WORKER_LOST_SPANS, tuple(s[:limit] for s in spans)),
        ]
        if killed:
            out.append((semconv.DASK_WORKER_LOST_KILLED_TASKS, tuple(killed)))
        return tuple(out)

    def _log(
        self,
        address: str,
        now: float,
        running: list[TaskState],
        attrs: tuple[tuple[str, AttrValue], ...],
        rss: int | None,
        ws: WorkerState | None,
    ) -> LogEntry:
        tracks: dict[str, TrackedSpan] = {}
        for ts in running:
            found = self._span_of(ts)
            if found is not None:
                tracks.setdefault(found[0], found[1])
        first = next(iter(tracks.values()), None)
        values = dict(attrs)
        tasks = ", ".join(
            f"{ts.key} ({ts.group.name}"
            + (f" in {'/'.join(t.identity.tags)!r}" if (t := self._span_or_none(ts)) else "")
            + (", KilledWorker" if ts.state == "erred" else "")
            + ")"
            for ts in islice(running, MAX_NAMED)
        )
        body = f"worker {address} lost" + (
            f" (killed by its nanny at {rss} bytes of process memory)" if rss else ""
        )
        body += f" while running {len(running)} task(s)" + (f": {tasks}" if tasks else "")
        if ws is not None:
            body += (
                f"; it held {values.get(semconv.DASK_WORKER_LOST_HELD, 0)} bytes of results,"
                f" last reported process memory"
                f" {values.get(semconv.DASK_WORKER_LOST_PROCESS_MEMORY, 0)}"
                f" of a {values.get(semconv.DASK_WORKER_LOST_MEMORY_LIMIT, 0)} byte limit"
            )
        return LogEntry(
            time_ns=ns(now),
            severity_number=semconv.SEVERITY_WARN.number,
            severity_text=semconv.SEVERITY_WARN.text,
            body=body,
            attributes=attrs + self._task_attributes(running, tracks),
            event_name=semconv.EVENT_WORKER_LOST,
            trace_id=first.trace_id if first is not None else 0,
            span_id=first.otel_span_id if first is not None else 0,
        )

    def _span_or_none(self, ts: TaskState) -> TrackedSpan | None:
        found = self._span_of(ts)
        return found[1] if found is not None else None

    # -- the metrics pass --------------------------------------------------------------
    def gauges(self) -> list[GaugeValue]:
        """Each worker's memory by type and limit, and the cluster's sums: O(workers)."""
        out: list[GaugeValue] = []
        totals = dict.fromkeys(semconv.MEMORY_TYPES, 0)
        for address, ws in list(self._scheduler.workers.items()):
            state = ws.memory
            values = (state.managed, state.unmanaged, state.spilled)
            worker = ((semconv.DASK_WORKER_ADDRESS, str(address)),)
            for kind, value in zip(semconv.MEMORY_TYPES, values, strict=True):
                totals[kind] += value
                attrs = (*worker, (semconv.ATTR_MEMORY_TYPE, kind))
                out.append(GaugeValue(semconv.M_WORKER_MEMORY, None, attrs, float(value)))
            if ws.memory_limit:
                limit = float(ws.memory_limit)
                out.append(GaugeValue(semconv.M_WORKER_MEMORY_LIMIT, None, worker, limit))
        for kind, total in totals.items():
            by_type = ((semconv.ATTR_MEMORY_TYPE, kind),)
            out.append(GaugeValue(semconv.M_CLUSTER_MEMORY, None, by_type, float(total)))
        return out
