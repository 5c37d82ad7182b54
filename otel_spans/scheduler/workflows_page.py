"""``/otel-spans/workflows`` on the scheduler's HTTP server (where Dask's dashboard is).

Lists the running workflows (root Dask spans not exported yet) and the last finished
ones, with their tasks by state, start, duration, trace id and trace link, as HTML or as
JSON (``?format=json``). It is a ``distributed.scheduler.http.routes`` module: listing
it there works, and the scheduler plugin adds the route itself when it is not listed.

A request is served on the event loop, as Dask's own pages are: it reads the running
roots' task states (a walk of each root's subtree, like Dask's ``Span.states``), at most
``MAX_RUNNING`` of them, and the bounded history the tracker keeps.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import dask.config
from distributed.http.utils import RequestHandler, get_handlers
from distributed.metrics import time

from otel_spans.config import format_trace_url
from otel_spans.markup import escape

if TYPE_CHECKING:
    from distributed import Scheduler

    from otel_spans.scheduler.tracking import SpanTracker

logger = logging.getLogger(__name__)

PATH = "/otel-spans/workflows"
MODULE = __name__
#: Running workflows listed at most (the oldest first).
MAX_RUNNING = 100
_SHOWN_STATES = ("waiting", "queued", "processing", "no-worker", "memory", "erred")


def workflows(tracker: SpanTracker, trace_url: str | None) -> list[dict[str, Any]]:
    """Running workflows (oldest first), then finished ones (newest first)."""
    now = time()
    rows: list[dict[str, Any]] = []
    running = [
        (span, tracker.tracks[uuid])
        for uuid, span in list(tracker.open.items())
        if uuid in tracker.tracks and tracker.tracks[uuid].is_root
    ]
    running.sort(key=lambda item: item[0].enqueued)
    for span, track in running[:MAX_RUNNING]:
        states: dict[str, int] = {
            str(s): n for s, n in span.states.items() if n and s in _SHOWN_STATES
        }
        rows.append(
            _row(
                track.tags, "running", states, span.enqueued, now - span.enqueued,
                track.trace_id, track.otel_span_id, trace_url, sampled=track.identity.sampled,
            )
        )  # fmt: skip
    for done in reversed(tracker.finished_roots):
        rows.append(
            _row(
                done.tags, "finished", dict(done.states), done.start_ns / 1e9,
                (done.end_ns - done.start_ns) / 1e9, done.trace_id, done.span_id, trace_url,
                sampled=done.sampled,
            )
        )  # fmt: skip
    return rows


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
) -> dict[str, Any]:
    return {
        "name": "/".join(tags),
        "status": status,
        "tasks": {s: int(states[s]) for s in _SHOWN_STATES if states.get(s)},
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
<a href="?format=json">JSON</a></p>
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
