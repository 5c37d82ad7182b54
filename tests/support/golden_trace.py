"""A deterministic, demo-like run written as the OTLP/JSON files the exporter writes.

Every byte is fixed by the design below (no clock, no randomness), so the report's
outputs for it can be kept as golden files (``tests/report/golden/``) and compared byte for
byte: a refactoring of the report that changes what it writes fails there.

The design, in milliseconds after ``T0``, on workers ``W1`` (threads 1, 2) and ``W2``
(thread 1):

- ``nightly`` (every task span kept: analysed task by task), 0 to 3000 + ``slower``:

  - ``nightly/load`` 0-800: group ``random-1a2b``, four tasks (two per worker);
  - ``nightly/aggregate`` 800-1800 + ``slower``: ``sums-3c4d`` (two tasks of 400 ms +
    ``slower`` each, one fetching its input from W2) then ``means-5e6f``;
  - ``nightly/model`` 1600-2900 (+ ``slower``): ``fit-7a8b``, one task erred;
  - ``nightly/report <v2> & "final"``: an HTML-special span name, group ``publish-9c0d``.

- ``sampled-etl`` (task spans sampled: analysed group by group), 5000-6000 + ``slower``:
  ``extract-aa11`` then ``transform-bb22`` (a dependency link), 100 tasks each.

Beside the traces: a metrics file (worker time by activity for ``sampled-etl``) and a
logs file (one ``dask.profile`` record of ``sums`` in ``nightly``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
W1 = "tcp://10.0.0.1:4001"
W2 = "tcp://10.0.0.2:4002"
NIGHTLY_TRACE = "0af7651916cd43dd8448eb211c80319c"
SAMPLED_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPECIAL = 'report <v2> & "final"'


def _value(value: object) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    raise TypeError(value)


def _attrs(attrs: dict[str, object]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in attrs.items()]


def _at(ms: float) -> str:
    return str(T0 + round(ms * MS))


class _Trace:
    def __init__(self, trace_id: str) -> None:
        self.trace_id = trace_id
        self.spans: list[dict[str, Any]] = []
        self.next_id = 1

    def span(
        self,
        name: str,
        parent: str,
        start_ms: float,
        end_ms: float,
        attrs: dict[str, object],
        *,
        events: list[dict[str, Any]] | None = None,
        links: Sequence[str] = (),
        error: str = "",
    ) -> str:
        span_id = f"{self.next_id:016x}"
        self.next_id += 1
        out: dict[str, Any] = {
            "traceId": self.trace_id,
            "spanId": span_id,
            "name": name,
            "kind": 1,
            "startTimeUnixNano": _at(start_ms),
            "endTimeUnixNano": _at(end_ms),
            "attributes": _attrs(attrs),
        }
        if parent:
            out["parentSpanId"] = parent
        if events:
            out["events"] = events
        if links:
            out["links"] = [
                {
                    "traceId": self.trace_id,
                    "spanId": link,
                    "attributes": _attrs({"dask.link.kind": "dependency"}),
                }
                for link in links
            ]
        if error:
            out["status"] = {"code": 2, "message": error}
        self.spans.append(out)
        return span_id

    def dask_span(self, tags: list[str], parent: str, start: float, end: float) -> str:
        attrs: dict[str, object] = {
            "dask.span.id": f"uuid-{self.trace_id[:6]}-{'-'.join(tags)}",
            "dask.span.tags": tags,
            "dask.span.name": "/".join(tags),
            "dask.span.continuation": 0,
            "dask.span.done": True,
        }
        return self.span(tags[-1], parent, start, end, attrs)


def _task(
    trace: _Trace,
    group_id: str,
    key: str,
    group: str,
    worker: str,
    thread: int,
    start: float,
    end: float,
    deps: list[str],
    *,
    fetch: tuple[float, float, str] | None = None,
    erred: bool = False,
) -> None:
    prefix = key.split("-")[0]
    attrs: dict[str, object] = {
        "dask.task.key": key,
        "dask.task.prefix": prefix,
        "dask.task.group": group,
        "dask.task.state": "erred" if erred else "memory",
        "dask.task.nbytes": 0 if erred else 8_000 + 100 * len(key),
        "dask.worker.address": worker,
        "dask.worker.thread": thread,
        "dask.task.dependencies": deps,
        "dask.task.sampled_because": "all",
    }
    events = None
    if erred:
        attrs["error.type"] = "ValueError"
        events = [
            {
                "name": "exception",
                "timeUnixNano": _at(end),
                "attributes": _attrs(
                    {
                        "exception.type": "ValueError",
                        "exception.message": "record 3 is corrupt",
                    }
                ),
            }
        ]
    task_id = trace.span(
        prefix,
        group_id,
        (fetch[0] if fetch else start),
        end,
        attrs,
        events=events,
        error="record 3 is corrupt" if erred else "",
    )
    if fetch is not None:
        trace.span("gather-dep", task_id, fetch[0], fetch[1], {"dask.phase.source": fetch[2]})
    trace.span("compute", task_id, start, end, {})


def _group(
    trace: _Trace,
    dask_span_id: str,
    name: str,
    start: float,
    end: float,
    *,
    tasks: int,
    compute_s: float,
    transfer_s: float = 0.0,
    erred: int = 0,
    dropped: int = 0,
    links: Sequence[str] = (),
) -> str:
    return trace.span(
        name.split("-")[0],
        dask_span_id,
        start,
        end,
        {
            "dask.task_group.name": name,
            "dask.task.prefix": name.split("-")[0],
            "dask.task_group.task_count": tasks,
            "dask.task_group.task_states.memory": tasks - erred,
            "dask.task_group.task_states.erred": erred,
            "dask.task_group.nbytes": 8_000 * (tasks - erred),
            "dask.task_group.duration.compute": compute_s,
            "dask.task_group.duration.transfer": transfer_s,
            "dask.task_group.submitted": int(_at(start)) - 5 * MS,
            "dask.task_group.task_spans.dropped": dropped,
            "dask.task_group.task_spans.kept": tasks - dropped,
        },
        links=links,
    )


def _nightly(slower: float) -> _Trace:
    s = slower * 1000  # ms
    t = _Trace(NIGHTLY_TRACE)
    root = t.span(
        "nightly",
        "",
        0,
        3000 + s,
        {
            "dask.span.id": "uuid-nightly",
            "dask.span.tags": ["nightly"],
            "dask.span.name": "nightly",
            "dask.span.continuation": 0,
            "dask.span.done": True,
            "dask.span.task_count": 12,
            "dask.span.task_states.memory": 11,
            "dask.span.task_states.erred": 1,
            "dask.workflow.sequential_time": 4.125 + 2 * slower,
            "dask.span.run.time.thread_cpu": 3.5 + 2 * slower,
            "dask.span.run.time.idle_or_other_spans": 1.25,
            "dask.span.run.time.disk_read": 0.375,
        },
        events=[
            {
                "name": "dask.cluster.nthreads",
                "timeUnixNano": _at(0),
                "attributes": _attrs({"dask.nthreads": 3}),
            }
        ],
    )
    load = t.dask_span(["nightly", "load"], root, 0, 800)
    g = _group(t, load, "random-1a2b", 0, 700, tasks=4, compute_s=1.29)
    _task(t, g, "random-0", "random-1a2b", W1, 1, 0, 300, [])
    _task(t, g, "random-1", "random-1a2b", W1, 2, 0, 350, [])
    _task(t, g, "random-2", "random-1a2b", W2, 1, 0, 320, [])
    _task(t, g, "random-3", "random-1a2b", W2, 1, 320, 640, [])
    agg = t.dask_span(["nightly", "aggregate"], root, 800, 1800 + s)
    sums = _group(
        t, agg, "sums-3c4d", 820, 1300 + s, tasks=2, compute_s=0.85 + 2 * slower, transfer_s=0.025
    )
    _task(
        t, sums, "sums-0", "sums-3c4d", W1, 1, 850, 1250 + s, ["random-0", "random-2"],
        fetch=(820, 845, W2),
    )  # fmt: skip
    _task(t, sums, "sums-1", "sums-3c4d", W2, 1, 850, 1300 + s, ["random-1", "random-3"])
    means = _group(t, agg, "means-5e6f", 1350 + s, 1500 + s, tasks=1, compute_s=0.15, links=[sums])
    _task(t, means, "means-0", "means-5e6f", W1, 1, 1350 + s, 1500 + s, ["sums-0", "sums-1"])
    model = t.dask_span(["nightly", "model"], root, 1600 + s, 2900 + s)
    fit = _group(
        t, model, "fit-7a8b", 1650 + s, 2600 + s, tasks=2, compute_s=1.0, erred=1, links=[means]
    )
    _task(t, fit, "fit-0", "fit-7a8b", W1, 1, 1650 + s, 2600 + s, ["means-0"])
    _task(t, fit, "fit-1", "fit-7a8b", W1, 2, 1650 + s, 1700 + s, ["means-0"], erred=True)
    special = t.dask_span(["nightly", SPECIAL], root, 2600 + s, 2950 + s)
    publish = _group(t, special, "publish-9c0d", 2650 + s, 2800 + s, tasks=1, compute_s=0.15)
    _task(t, publish, "publish-0", "publish-9c0d", W2, 1, 2650 + s, 2800 + s, ["fit-0"])
    return t


def _sampled(slower: float) -> _Trace:
    s = slower * 1000
    t = _Trace(SAMPLED_TRACE)
    root = t.span(
        "sampled-etl",
        "",
        5000,
        6000 + s,
        {
            "dask.span.id": "uuid-sampled",
            "dask.span.tags": ["sampled-etl"],
            "dask.span.name": "sampled-etl",
            "dask.span.task_count": 200,
            "dask.span.task_states.memory": 200,
        },
        events=[
            {
                "name": "dask.cluster.nthreads",
                "timeUnixNano": _at(5000),
                "attributes": _attrs({"dask.nthreads": 4}),
            }
        ],
    )
    extract = _group(t, root, "extract-aa11", 5010, 5400, tasks=100, compute_s=1.2, dropped=95)
    _group(
        t, root, "transform-bb22", 5400, 5990 + s, tasks=100, compute_s=2.0, dropped=95,
        links=[extract],
    )  # fmt: skip
    return t


def _request(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attrs({"service.name": "dask"})},
                "scopeSpans": [{"scope": {"name": "otel_spans"}, "spans": spans}],
            }
        ]
    }


def _metrics() -> dict[str, Any]:
    points = [
        {
            "attributes": _attrs({"dask.span.root": "sampled-etl", "dask.activity": activity}),
            "timeUnixNano": _at(6100),
            "asDouble": seconds,
        }
        for activity, seconds in (("thread-cpu", 2.5), ("memory-read", 0.5))
    ]
    return {
        "resourceMetrics": [
            {
                "scopeMetrics": [
                    {
                        "metrics": [
                            {
                                "name": "dask.span.execute.time",
                                "sum": {"dataPoints": points},
                            }
                        ]
                    }
                ]
            }
        ]
    }


FOLDED = (
    "worker.py:execute;demo.py:_sums;pandas/groupby.py:agg 30\n"
    "worker.py:execute;demo.py:_sums;pandas/groupby.py:agg;numpy/sum.py:sum 12\n"
    "worker.py:execute;demo.py:_sums;time.py:sleep 6\n"
    "(other stacks) 2\n"
)


def _logs() -> dict[str, Any]:
    return {
        "resourceLogs": [
            {
                "scopeLogs": [
                    {
                        "logRecords": [
                            {
                                "eventName": "dask.profile",
                                "traceId": NIGHTLY_TRACE,
                                "spanId": f"{1:016x}",
                                "body": {"stringValue": FOLDED},
                                "attributes": _attrs(
                                    {
                                        "dask.task.prefix": "sums",
                                        "dask.profile.samples": 50,
                                        "dask.profile.folded_stacks": 3,
                                    }
                                ),
                            }
                        ]
                    }
                ]
            }
        ]
    }


def write_run(directory: Path, *, slower: float = 0.0) -> Path:
    """The run's traces, metrics and logs files in ``directory``; ``slower`` seconds
    added to each ``sums`` task (and so to everything after it)."""
    directory.mkdir(parents=True, exist_ok=True)

    def dump(name: str, request: dict[str, Any]) -> None:
        (directory / name).write_text(json.dumps(request) + "\n", encoding="utf-8")

    nightly, sampled = _nightly(slower), _sampled(slower)
    dump("traces.jsonl", _request(nightly.spans))
    with (directory / "traces.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(_request(sampled.spans)) + "\n")
    dump("metrics.jsonl", _metrics())
    dump("logs.jsonl", _logs())
    return directory
