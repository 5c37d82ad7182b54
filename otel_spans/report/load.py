"""Load spans from OTLP/JSON lines: our embedded default files or the collector's file exporter.

Loading is separate from analysis and rendering: it yields plain :class:`LoadedSpan`
values and reports malformed input as :class:`InputError` naming the file and line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_spans import semconv


class InputError(ValueError):
    """Input that is not OTLP/JSON; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class LoadedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    status_code: int = 0
    status_message: str = ""
    service_name: str = ""
    #: (name, time_ns, attributes) of each event.
    events: tuple[tuple[str, int, dict[str, Any]], ...] = ()
    #: (trace_id, span_id, attributes) of each link.
    links: tuple[tuple[str, str, dict[str, Any]], ...] = ()

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def error(self) -> str:
        """What went wrong, as ``<error.type>: <message>``: an erred task span's status
        description is the message alone (its type is ``error.type``); older files,
        without ``error.type``, wrote ``<type>: <message>`` there: kept as it is."""
        kind = self.attributes.get(semconv.ERROR_TYPE)
        message = self.status_message
        if not kind or kind == semconv.ERROR_TYPE_OTHER:
            return message
        return f"{kind}: {message}" if message else str(kind)


def any_value(value: dict[str, Any]) -> Any:
    """Decode an OTLP/JSON ``AnyValue``."""
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [any_value(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return attributes(value["kvlistValue"].get("values", []))
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def attributes(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {item["key"]: any_value(item.get("value", {})) for item in items}


def files_in(path: Path, signal: str = "traces") -> list[Path]:
    """A file, or the ``<signal>*.json*`` files of a directory, in name order (for the
    embedded default's rotated files, ``<signal>-<role>-<pid>.<seq>[.r<n>].jsonl``,
    that is write order: each before its process's active ``.jsonl``)."""
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.name.startswith(signal) and ".json" in p.name)
    if path.exists():
        return [path]
    raise InputError(f"{path}: no such file or directory")


#: The directory the report writes into by default: never searched for input.
REPORT_DIRECTORY = "otel-spans-report"


def _holds_traces(names: list[str]) -> bool:
    return any(name.startswith("traces") and ".json" in name for name in names)


def trace_sources(path: Path) -> list[Path]:
    """Where the traces under ``path`` are: the file itself, or every directory at or
    below ``path`` that holds ``traces*.json*`` files, in path order (the report's own
    output directories and hidden ones skipped). Each is read as one set of files: a
    run, or several runs written into one directory."""
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    if not path.is_dir():
        return [path]
    found = []
    for directory, subdirectories, names in os.walk(path):
        subdirectories[:] = sorted(
            d for d in subdirectories if d != REPORT_DIRECTORY and not d.startswith(".")
        )
        if _holds_traces(names):
            found.append(Path(directory))
    return found


def _lines(path: Path, signal: str) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    for file in files_in(path, signal):
        try:
            f = file.open(encoding="utf-8")
        except FileNotFoundError:  # deleted by a running scheduler's cap since listed
            continue
        with f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    request = json.loads(line)
                except ValueError as e:
                    raise InputError(f"{file}:{lineno}: not JSON ({e})") from None
                if not isinstance(request, dict):
                    raise InputError(f"{file}:{lineno}: not an OTLP/JSON request")
                yield file, lineno, request


def load_spans(
    path: Path, keep: Callable[[LoadedSpan], bool] | None = None
) -> Iterator[LoadedSpan]:
    """Every span in ``path`` (a file or a directory of OTLP/JSON lines files); with
    ``keep``, only the spans it accepts (the others are dropped as they are read)."""
    for file, lineno, request in _lines(path, "traces"):
        try:
            spans = list(_spans_of(request))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise InputError(
                f"{file}:{lineno}: not an OTLP/JSON trace request (bad field {e})"
            ) from None
        yield from spans if keep is None else filter(keep, spans)


def is_dask_or_group_span(span: LoadedSpan) -> bool:
    """A Dask span or a task group span: all a run's outline and history need (its
    task and phase spans, most of a trace, are not)."""
    return semconv.DASK_SPAN_ID in span.attributes or (
        semconv.DASK_TASK_GROUP_NAME in span.attributes
    )


def _beside(path: Path, signal: str) -> list[dict[str, Any]]:
    """The requests in the ``signal`` files beside ``path`` (the traces): none when
    there are none or they cannot be read, which only means less to show."""
    try:
        return [request for _, _, request in _lines(path if path.is_dir() else path.parent, signal)]
    except InputError:
        return []


def load_activity(path: Path) -> dict[str, dict[str, float]]:
    """Worker time by activity per workflow (``dask.span.root``), from metrics files.

    The latest point of each ``dask.span.execute.time`` series wins (cumulative
    temporality); a missing or unreadable metrics file just means no breakdown.
    """
    latest: dict[tuple[tuple[str, Any], ...], tuple[int, float]] = {}
    for request in _beside(path, "metrics"):
        for rm in request.get("resourceMetrics", []):
            for sm in rm.get("scopeMetrics", []):
                for metric in sm.get("metrics", []):
                    if metric.get("name") != semconv.M_EXECUTE_TIME:
                        continue
                    for point in metric.get("sum", {}).get("dataPoints", []):
                        attrs = attributes(point.get("attributes", []))
                        series = tuple(sorted(attrs.items()))
                        when = int(point.get("timeUnixNano", 0))
                        value = float(point.get("asDouble", point.get("asInt", 0)))
                        if series not in latest or when >= latest[series][0]:
                            latest[series] = (when, value)
    out: dict[str, dict[str, float]] = {}
    for series, (_, value) in latest.items():
        attrs = dict(series)
        by_activity = out.setdefault(str(attrs.get(semconv.ATTR_SPAN_ROOT)), {})
        activity = str(attrs.get(semconv.ATTR_ACTIVITY))
        by_activity[activity] = by_activity.get(activity, 0.0) + value
    return out


@dataclass(frozen=True, slots=True)
class LoadedProfile:
    """One ``dask.profile`` log record: a task prefix's folded stacks over a workflow."""

    trace_id: str
    #: The root Dask span's export it belongs to.
    span_id: str
    prefix: str
    #: Folded stacks text, ``frame;frame <samples>`` per line.
    folded: str
    samples: int
    #: Stacks summed into the "(other stacks)" line.
    folded_stacks: int


def load_profiles(path: Path) -> dict[str, list[LoadedProfile]]:
    """The ``dask.profile`` records of logs files beside ``path``, by trace id, the
    most sampled prefix first; no or unreadable logs files just mean no profiles."""
    out: dict[str, list[LoadedProfile]] = {}
    for request in _beside(path, "logs"):
        for resource_logs in request.get("resourceLogs", []):
            for scope_logs in resource_logs.get("scopeLogs", []):
                for record in scope_logs.get("logRecords", []):
                    if record.get("eventName") != semconv.LOG_PROFILE:
                        continue
                    attrs = attributes(record.get("attributes", []))
                    body = any_value(record.get("body", {}))
                    trace_id = str(record.get("traceId", ""))
                    out.setdefault(trace_id, []).append(
                        LoadedProfile(
                            trace_id=trace_id,
                            span_id=str(record.get("spanId", "")),
                            prefix=str(attrs.get(semconv.DASK_TASK_PREFIX, "?")),
                            folded=body if isinstance(body, str) else "",
                            samples=as_int(attrs.get(semconv.DASK_PROFILE_SAMPLES)),
                            folded_stacks=as_int(attrs.get(semconv.DASK_PROFILE_FOLDED_STACKS)),
                        )
                    )
    for profiles in out.values():
        profiles.sort(key=lambda p: (-p.samples, p.prefix))
    return out


def as_int(value: object, default: int = 0) -> int:
    """An integer attribute's value; ``default`` when absent or not an integer (files
    written by anything may hold anything; a bool is not a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def as_float(value: object, default: float = 0.0) -> float:
    """A numeric attribute's value as a float; ``default`` when absent or not a number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return default


def _spans_of(request: dict[str, Any]) -> Iterator[LoadedSpan]:
    for resource_spans in request.get("resourceSpans", []):
        resource = attributes(resource_spans.get("resource", {}).get("attributes", []))
        service = str(resource.get(semconv.SERVICE_NAME, ""))
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                status = span.get("status", {})
                yield LoadedSpan(
                    trace_id=span["traceId"],
                    span_id=span["spanId"],
                    parent_span_id=span.get("parentSpanId", ""),
                    name=span["name"],
                    start_ns=int(span["startTimeUnixNano"]),
                    end_ns=int(span["endTimeUnixNano"]),
                    attributes=attributes(span.get("attributes", [])),
                    status_code=int(status.get("code", 0)),
                    status_message=status.get("message", ""),
                    service_name=service,
                    events=tuple(
                        (
                            e["name"],
                            int(e.get("timeUnixNano", 0)),
                            attributes(e.get("attributes", [])),
                        )
                        for e in span.get("events", [])
                    ),
                    links=tuple(
                        (lk["traceId"], lk["spanId"], attributes(lk.get("attributes", [])))
                        for lk in span.get("links", [])
                    ),
                )
