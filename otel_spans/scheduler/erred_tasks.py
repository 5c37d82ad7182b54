"""What an erred task's span and log carry: its exception and the scheduler's story.

Called by :class:`~otel_spans.scheduler.task_groups.TaskGroups` when a task errs, on
the scheduler's event loop: the exception is read from the texts the worker sent
(never unpickled), the story from the scheduler's bounded transition log. Kept apart
from the groups' bookkeeping, which every finished task goes through.
"""

from __future__ import annotations

import pickletools
from itertools import islice
from typing import TYPE_CHECKING, Any

from otel_spans import semconv
from otel_spans.records import AttrValue, LogEntry, SpanEventRecord, ns
from otel_spans.scheduler.span_state import SpanIdentity
from otel_spans.task_records import DeferredTask, ExceptionRecord, TaskRecord

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.scheduler import TaskState

#: Most transition events recorded on one erred task span (the latest; the rest, and
#: entries of a shape not known, counted in the span's ``dropped_events_count``).
MAX_STORY_EVENTS = 50
#: Most recommendations recorded on one transition event (the rest counted in
#: ``dask.transition.recommendations_dropped``).
MAX_RECOMMENDATIONS = 16
#: Most pickle opcodes read in search of an exception's class.
_MAX_OPCODES = 64
#: Modules whose globals wrap an exception's class in its pickle, not the class itself
#: (tblib's ``unpickle_exception``, which distributed installs on every task error).
_WRAPPERS = ("tblib", "copyreg")
#: A global of this module first: the class is pickled by value (defined in
#: ``__main__`` or a function), and its qualified name is not one global to read.
_BY_VALUE = "cloudpickle"


def exception_type(kwargs: dict[str, Any], max_length: int) -> str:
    """The fully qualified class name of an erred task's exception (``json.decoder.
    JSONDecodeError``; builtins bare, ``ValueError``), never unpickling it.

    The worker sends the exception pickled: the class is the first global of that
    pickle that is not one of tblib's wrappers, read with :mod:`pickletools` (which
    runs nothing). When no such global is found (a class pickled by value, a frame
    compressed on the way), the name in the ``repr`` the worker also sent, unqualified.
    """
    found = _pickled_class(kwargs.get("exception"))
    if found:
        return found[:max_length]
    text = str(kwargs.get("exception_text") or "")[: max_length * 2]
    return text.partition("(")[0].strip()[:max_length] or "Exception"


def _pickle_bytes(exception: object) -> bytes | None:
    """The pickle of an exception as distributed carries it: ``Serialize(bytes)``
    within one process, ``Serialized`` (a ``bytes`` frame, uncompressed) after a comm."""
    data = getattr(exception, "data", None)
    if isinstance(data, bytes):
        return data
    header, frames = getattr(exception, "header", None), getattr(exception, "frames", None)
    if not isinstance(header, dict) or not isinstance(frames, list | tuple):
        return None
    if header.get("type") != "bytes" or header.get("serializer") != "dask":
        return None
    if any(c is not None for c in header.get("compression") or ()):
        return None
    try:
        return b"".join(bytes(frame) for frame in frames)
    except TypeError:
        return None


def _pickled_class(exception: object) -> str:
    data = _pickle_bytes(exception)
    if not data:
        return ""
    strings: list[str] = []
    try:
        for opcode, arg, _ in islice(pickletools.genops(data), _MAX_OPCODES):
            if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
                strings.append(str(arg))
                continue
            if opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                module, name = strings[-2], strings[-1]
            elif opcode.name == "GLOBAL" and isinstance(arg, str) and " " in arg:
                module, name = arg.split(" ", 1)
            else:
                continue
            root = module.split(".")[0]
            if root == _BY_VALUE:
                return ""
            if root not in _WRAPPERS:
                return semconv.qualified_type(module, name)
    except Exception:  # a pickle we cannot read is no reason to lose the error
        return ""
    return ""


def exception_record(
    kwargs: dict[str, Any], max_length: int, *, messages: bool = True
) -> ExceptionRecord:
    """The exception of an erred task from what the worker sent (never unpickled).

    Without ``messages`` only the type is kept: message and traceback may quote data.
    The stack trace is Python's own rendering, as ``traceback.format_exception``
    writes it (Dask sends the frames only): a header, the frames, ``Type: message``.
    """
    kind = exception_type(kwargs, max_length)
    if not messages:
        return ExceptionRecord(type=kind, message="", stacktrace="")
    text = str(kwargs.get("exception_text") or "")[: max_length * 2]
    rest = text.partition("(")[2]
    message = rest[:-1] if rest.endswith(")") else text
    if message[:1] in "'\"" and message[-1:] == message[:1]:
        message = message[1:-1]
    message = message[:max_length]
    frames = str(kwargs.get("traceback_text") or "")[:max_length]
    last = f"{kind}: {message}" if message else kind
    stacktrace = f"Traceback (most recent call last):\n{frames}{last}" if frames else ""
    return ExceptionRecord(type=kind, message=message, stacktrace=stacktrace[:max_length])


def story_event(entry: object) -> SpanEventRecord | None:
    """One entry of ``Scheduler.story`` as a span event; None for a shape not known.

    distributed writes ``(key, start, finish, recommendations, stimulus_id, timestamp)``
    (a ``Transition`` named tuple since 2024); older releases wrote
    ``(key, start, finish, recommendations, timestamp)``. Recommendations are kept as
    ``"<key>: <state>"`` texts.
    """
    if not isinstance(entry, tuple) or len(entry) not in (5, 6):
        return None
    if len(entry) == 6:
        _, start, finish, recommendations, stimulus, timestamp = entry
    else:
        _, start, finish, recommendations, timestamp = entry
        stimulus = None
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float):
        return None
    attrs: list[tuple[str, AttrValue]] = [
        (semconv.DASK_TRANSITION_FROM, str(start)),
        (semconv.DASK_TRANSITION_TO, str(finish)),
    ]
    if stimulus is not None:
        attrs.append((semconv.DASK_TRANSITION_STIMULUS, str(stimulus)))
    if isinstance(recommendations, dict) and recommendations:
        texts = tuple(f"{k}: {v}" for k, v in islice(recommendations.items(), MAX_RECOMMENDATIONS))
        attrs.append((semconv.DASK_TRANSITION_RECOMMENDATIONS, texts))
        if len(recommendations) > MAX_RECOMMENDATIONS:
            left_out = len(recommendations) - MAX_RECOMMENDATIONS
            attrs.append((semconv.DASK_TRANSITION_RECOMMENDATIONS_DROPPED, left_out))
    return SpanEventRecord(semconv.EVENT_TRANSITION, ns(timestamp), tuple(attrs))


def key_story(scheduler: Scheduler, key: Any) -> tuple[tuple[SpanEventRecord, ...], int]:
    """The scheduler's transitions of ``key`` (searches its bounded transition log) as
    events, the latest ``MAX_STORY_EVENTS``, and how many of its entries were left out
    (older ones, and those of a shape not known)."""
    # Dask's story of a key also holds other keys' transitions that recommended
    # something for it: only the key's own are its story.
    own = [entry for entry in scheduler.story(key) if entry[:1] == (key,)]
    events = (story_event(entry) for entry in own[-MAX_STORY_EVENTS:])
    kept = tuple(event for event in events if event is not None)
    return kept, len(own) - len(kept)


def erred_record(
    scheduler: Scheduler,
    ts: TaskState,
    kwargs: dict[str, Any],
    span: SpanIdentity,
    pending: DeferredTask,
    *,
    max_length: int,
    messages: bool,
    max_stories: int,
) -> TaskRecord:
    """The record of an erred run, built at once from its ``pending`` copy: the
    exception and the key's story (for the first ``max_stories`` erred tasks of
    ``span``) are read now, on the loop, and the erred-task log needs them too."""
    exception = exception_record(kwargs, max_length, messages=messages)
    events: tuple[SpanEventRecord, ...] = ()
    dropped = 0
    if span.stories < max_stories:
        span.stories += 1
        events, dropped = key_story(scheduler, ts.key)
    return pending.build(exception=exception, events=events, events_dropped=dropped)


def erred_log(record: TaskRecord, trace_id: int, *, kept: bool, sampled: bool = True) -> LogEntry:
    """The log record of an erred task: under its span when that is kept, else under
    its group's, so that the error is found from the trace either way."""
    exc = record.exception
    assert exc is not None
    return LogEntry(
        time_ns=record.end_ns,
        severity_number=semconv.SEVERITY_ERROR.number,
        severity_text=semconv.SEVERITY_ERROR.text,
        body=f"Task {record.key} erred: {exc.describe()}",
        attributes=(
            (semconv.DASK_TASK_KEY, record.key),
            (semconv.DASK_TASK_PREFIX, record.prefix),
            (semconv.DASK_WORKER_ADDRESS, record.worker),
            (semconv.EXCEPTION_TYPE, exc.type),
            *(((semconv.EXCEPTION_MESSAGE, exc.message),) if exc.message else ()),
            *(((semconv.EXCEPTION_STACKTRACE, exc.stacktrace),) if exc.stacktrace else ()),
        ),
        event_name=semconv.LOG_TASK_ERRED,
        trace_id=trace_id,
        span_id=record.span_id if kept else record.parent_span_id,
        sampled=sampled,
    )
