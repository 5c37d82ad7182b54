"""``/otel-spans/workflows`` on the scheduler's HTTP server (where Dask's dashboard is).

Lists the running workflows (root Dask spans not exported yet) and the last finished
ones, with their tasks by state, start, duration, trace id and trace link, as HTML or as
JSON (``?format=json``). It is a ``distributed.scheduler.http.routes`` module: listing
it there works, and the scheduler plugin adds the route itself when it is not listed.

A request is served on the event loop, as Dask's own pages are, and its cost and size
are bounded whatever the scheduler holds: at most ``MAX_RUNNING`` running and
``MAX_FINISHED_ROOTS`` finished workflows; names cut to ``names.LABEL_LENGTH``
characters (they entered valid UTF-8, cut to ``max-attribute-length``); the running
roots' task counts read from at most ``MAX_WALK`` spans and task groups in all (a walk
of each root's subtree, as Dask's ``Span.states`` does, cut short where the budget ends,
and the row says so).
"""

from __future__ import annotations

import heapq
import json
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import dask.config
from distributed.http.utils import RequestHandler, get_handlers
from distributed.metrics import time

from otel_spans.config import format_trace_url
from otel_spans.markup import escape
from otel_spans.names import LABEL_LENGTH, clean

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.scheduler import TaskStateState
    from distributed.spans import Span

    from otel_spans.scheduler.tracking import SpanTracker

logger = logging.getLogger(__name__)

PATH = "/otel-spans/workflows"
MODULE = __name__
#: Running workflows listed at most (the oldest first).
MAX_RUNNING = 100
#: Spans and task groups one request reads to count the running workflows' tasks, in
#: all (the oldest workflow's first); a row whose walk the budget cut is marked partial.
MAX_WALK = 10_000
#: The body of a response stays under this (HTML or JSON) with a ``trace-url`` template
#: of up to ``BOUNDED_TRACE_URL`` ASCII characters: at most 200 rows of a name of 256
#: characters (12 bytes each at worst, escaped: an astral character in JSON) and a few
#: short cells.
MAX_BODY_BYTES = 1 << 20
BOUNDED_TRACE_URL = 200
_SHOWN_STATES: tuple[TaskStateState, ...] = (
    "waiting", "queued", "processing", "no-worker", "memory", "erred"
)  # fmt: skip


def workflows(tracker: SpanTracker, trace_url: str | None) -> list[dict[str, Any]]:
    """Running workflows (oldest first), then finished ones (newest first)."""
    now = time()
    rows: list[dict[str, Any]] = []
    running = heapq.nsmallest(
        MAX_RUNNING,
        (
            (span, tracker.tracks[uuid])
            for uuid, span in list(tracker.open.items())
            if uuid in tracker.tracks and tracker.tracks[uuid].is_root
        ),
        key=lambda item: item[0].enqueued,
    )
    budget = MAX_WALK
    for span, track in running:
        states, budget, complete = task_states(span, budget)
        rows.append(
            _row(
                track.tags, "running", states, span.enqueued, now - span.enqueued,
                track.trace_id, track.otel_span_id, trace_url, sampled=track.identity.sampled,
                partial=not complete,
            )
        )  # fmt: skip
    for done in reversed(tracker.exporter.finished_roots):
        rows.append(
            _row(
                done.tags, "finished", dict(done.states), done.start_ns / 1e9,
                (done.end_ns - done.start_ns) / 1e9, done.trace_id, done.span_id, trace_url,
                sampled=done.sampled,
            )
        )  # fmt: skip
    return rows


def task_states(root: Span, budget: int) -> tuple[dict[str, int], int, bool]:
    """The tasks of ``root``'s tree by state, as Dask's ``Span.states`` counts them,
    from at most ``budget`` spans and task groups: the counts, the budget left, and
    whether the whole tree was read (if not, the counts are a lower bound)."""
    counts: dict[str, int] = dict.fromkeys(_SHOWN_STATES, 0)
    # a stack of iterators: a span with 100,000 children costs one step per child read
    stack: list[Iterator[Span]] = [iter((root,))]
    while stack:
        span = next(stack[-1], None)
        if span is None:
            stack.pop()
            continue
        if budget <= 0:
            return counts, 0, False
        budget -= 1
        for tg in span.groups:
            if budget <= 0:
                return counts, 0, False
            budget -= 1
            states = tg.states
            for state in _SHOWN_STATES:
                counts[state] += states.get(state, 0)
        stack.append(iter(span.children))
    return counts, budget, True


def _row(
    tags: tuple[str, ...],
    status: str,
    states: dict[str, int],
    start: float,
    duration: float,
    trace_id: int,
    span_id: int,
    trace_url: str | None,
    *,
    sampled: bool,
    partial: bool = False,
) -> dict[str, Any]:
    return {
        # as the dask.span.name metric attribute shows it
        "name": clean("/".join(tags), LABEL_LENGTH),
        "status": status,
        "tasks": {s: int(states[s]) for s in _SHOWN_STATES if states.get(s)},
        # the walk's budget ran out: "tasks" counts only part of the tree
        "tasks_partial": partial,
        "start": start,
        "duration": max(duration, 0.0),
        "trace_id": f"{trace_id:032x}",
        "trace_url": format_trace_url(trace_url, trace_id, span_id) if trace_url else None,
        # an unsampled caller's workflow is in no trace backend
        "exported": sampled,
    }


def render(rows: list[dict[str, Any]]) -> str:
    """The page: one table, no script, every value escaped (a workflow's name is user
    input: markup, control characters, lone surrogates)."""
    from datetime import datetime, timezone

    def cell(text: object) -> str:
        return f"<td>{escape(text)}</td>"

    body = []
    for row in rows:
        started = datetime.fromtimestamp(row["start"], timezone.utc).strftime("%H:%M:%S")
        tasks = ", ".join(f"{n} {state}" for state, n in row["tasks"].items()) or "—"
        if row.get("tasks_partial"):
            tasks = f"at least {tasks}"
        trace = escape(row["trace_id"])
        if row["trace_url"]:
            trace = f'<a href="{escape(row["trace_url"])}">{trace}</a>'
        elif not row["exported"]:
            trace += " (not sampled)"
        seconds = row["duration"]
        duration = f"{seconds:.2f} s" if seconds < 10 else f"{seconds:,.0f} s"
        body.append(
            f'<tr class="{row["status"]}">{cell(row["name"])}{cell(row["status"])}'
            f"{cell(tasks)}{cell(started + ' UTC')}{cell(duration)}<td>{trace}</td></tr>"
        )
    rows_html = "\n".join(body) or '<tr><td colspan="6">No workflow yet.</td></tr>'
    partial = ""
    if any(row.get("tasks_partial") for row in rows):
        partial = (
            f"\n<p>Task counts marked “at least” are partial: a request reads {MAX_WALK:,} "
            "spans and task groups at most.</p>"
        )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>otel-spans: workflows</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; }}
th, td {{ padding: .35em .8em; border-bottom: 1px solid #ddd; text-align: left; }}
th {{ background: #f4f4f4; }}
tr.running td:nth-child(2) {{ color: #0a6; font-weight: 600; }}
td {{ font-variant-numeric: tabular-nums; }}
</style></head>
<body><h1>Workflows</h1>
<p>Running workflows (oldest first), then the last finished ones (newest first).
<a href="?format=json">JSON</a></p>{partial}
<table><thead><tr><th>workflow</th><th>status</th><th>tasks</th><th>started</th>
<th>duration</th><th>trace</th></tr></thead>
<tbody>
{rows_html}
</tbody></table></body></html>
"""


class WorkflowsHandler(RequestHandler):
    """GET the workflows page (``?format=json`` for JSON)."""

    def get(self) -> None:
        scheduler = self.server
        plugin = scheduler.plugins.get("otel-spans") if scheduler is not None else None
        tracker = getattr(plugin, "_tracker", None)
        settings = getattr(plugin, "settings", None)
        trace_url = getattr(settings, "trace_url", None)
        rows = workflows(tracker, trace_url) if tracker is not None else []
        if self.get_argument("format", "html") == "json":
            self.set_header("Content-Type", "application/json")
            self.write(json.dumps({"workflows": rows}))
        else:
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.write(render(rows))


#: What ``distributed.scheduler.http.routes`` reads from this module.
routes: list[tuple[str, type, dict[str, Any]]] = [(PATH, WorkflowsHandler, {})]


def register(scheduler: Scheduler) -> bool:
    """Add the route to a running scheduler's HTTP server, unless the configuration
    already lists this module. Returns whether the page is served."""
    application = getattr(scheduler, "http_application", None)
    if application is None:
        return False
    if MODULE in (dask.config.get("distributed.scheduler.http.routes", None) or []):
        return True
    prefix = dask.config.get("distributed.scheduler.dashboard.prefix", None) or "/"
    application.add_handlers(r".*", get_handlers(scheduler, [MODULE], prefix=prefix))
    return True
