"""Records of Python's ``logging`` (Dask's own loggers) as OTel log records.

Dask says what goes wrong in a cluster mostly in plain log lines: a worker pausing for
memory, a lost worker, an unresponsive event loop, a task that failed. Sent with the
traces and metrics, they can be read beside them. One handler serves the whole process
(:func:`attach`): ``LocalCluster(processes=False)`` runs a scheduler and workers in one
process, and each record must still leave once, through the first sink attached.

What a record costs the thread that logs it is bounded and never raises: a rate check,
one message formatting (the cost Dask's own stream handler pays already), a tuple of
attributes and a queue append. What a storm of records beyond ``max-per-second`` costs
is a counter increment each (``suppressed``), and a full queue drops and counts like
every other pipeline. Task code is not affected: the loggers' levels, their other
handlers and propagation stay as they were; the handler is one more entry in
``logging.getLogger("distributed").handlers``, removed when the last sink detaches.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable

from opentelemetry import trace

from otel_spans import semconv
from otel_spans.export.pipeline import ThreadProducer
from otel_spans.records import AttrValue, LogEntry
from otel_spans.settings import PythonLogSettings
from otel_spans.telemetry.logs import LogSource

logger = logging.getLogger("otel_spans")

#: A value logged as an argument -> the (trace id, span id, whether the trace is sampled)
#: of what it names, if known.
About = Callable[[object], tuple[int, int, bool] | None]

#: How many of a record's arguments are looked up as task keys or span ids.
_MAX_ARGS_LOOKED_UP = 4
#: Python level -> OTel SeverityNumber at that level (DEBUG, INFO, WARN, ERROR, FATAL).
_SEVERITIES = (
    (logging.CRITICAL, semconv.SEVERITY_FATAL.number),
    (logging.ERROR, semconv.SEVERITY_ERROR.number),
    (logging.WARNING, semconv.SEVERITY_WARN.number),
    (logging.INFO, semconv.SEVERITY_INFO.number),
    (logging.DEBUG, semconv.SEVERITY_DEBUG.number),
)


def severity_number(levelno: int) -> int:
    """OTel's SeverityNumber of a ``logging`` level; a custom level between two standard
    ones goes up to three steps above the lower one (WARNING + 5 is WARN2)."""
    for level, number in _SEVERITIES:
        if levelno >= level:
            return number + min((levelno - level + 4) // 5, 3)
    return semconv.SEVERITY_TRACE.number


class PythonLogs:
    """One process role's sink: records become log entries for its pipeline.

    ``about`` names the trace and span of a task key or Dask span a record mentions
    among its arguments; records logged inside a task take the task's own span from
    the OTel context instead. Called under the process handler's lock only.
    """

    def __init__(
        self,
        settings: PythonLogSettings,
        producer: ThreadProducer[LogSource],
        about: About,
        *,
        exception_messages: bool,
    ):
        self.settings = settings
        self.level = settings.level if settings.level is not None else logging.CRITICAL + 1
        self._producer = producer
        self._about = about
        self._exception_messages = exception_messages
        self._max_per_second = settings.max_per_second
        self._second = 0
        self._this_second = 0
        #: Records this sink failed to turn into entries (bad arguments, say).
        self.errors = 0

    def stats(self) -> dict[str, int | bool]:
        """Its own counters (what became of its records is in its pipeline's)."""
        sinks = _handler.sinks
        return {"active": bool(sinks) and sinks[0] is self, "errors": self.errors}

    def handle(self, record: logging.LogRecord) -> None:
        second = int(time.monotonic())
        if second != self._second:
            self._second, self._this_second = second, 0
        if self._this_second >= self._max_per_second:
            self._producer.suppress()
            return
        self._this_second += 1
        self._producer.submit(self.entry(record))

    def entry(self, record: logging.LogRecord) -> LogEntry:
        trace_id, span_id, sampled = self._context(record)
        return LogEntry(
            time_ns=int(record.created * 1e9),
            severity_number=severity_number(record.levelno),
            severity_text=record.levelname,
            body=self._message(record),
            attributes=self._attributes(record),
            event_name="",
            trace_id=trace_id,
            span_id=span_id,
            scope=record.name,
            sampled=sampled,
        )

    def _message(self, record: logging.LogRecord) -> str:
        if not self._exception_messages:
            # The template, without what it was formatted with: arguments can quote
            # data (an exception's text, a task's repr), the template cannot.
            return str(record.msg)
        try:
            return record.getMessage()
        except Exception:  # arguments that do not fit the template
            return str(record.msg)

    def _attributes(self, record: logging.LogRecord) -> tuple[tuple[str, AttrValue], ...]:
        attributes: tuple[tuple[str, AttrValue], ...] = (
            (semconv.CODE_FILE_PATH, record.pathname),
            (semconv.CODE_LINE_NUMBER, record.lineno),
            (semconv.CODE_FUNCTION_NAME, record.funcName),
            (semconv.THREAD_NAME, str(record.threadName)),
        )
        exc_info = record.exc_info
        if exc_info and exc_info[0] is not None:
            attributes += ((semconv.EXCEPTION_TYPE, _type_name(exc_info[0])),)
            if self._exception_messages:
                attributes += (
                    (semconv.EXCEPTION_MESSAGE, str(exc_info[1])),
                    (semconv.EXCEPTION_STACKTRACE, "".join(traceback.format_exception(*exc_info))),
                )
        return attributes

    def _context(self, record: logging.LogRecord) -> tuple[int, int, bool]:
        """Trace and span ids, and whether the trace is sampled: the current span's,
        else those of what a logged argument names."""
        current = trace.get_current_span().get_span_context()
        if current.is_valid:  # logged inside a task (or other traced work)
            return current.trace_id, current.span_id, current.trace_flags.sampled
        args = record.args
        if isinstance(args, tuple):
            for arg in args[:_MAX_ARGS_LOOKED_UP]:
                if isinstance(arg, str | tuple):
                    found = self._about(arg)
                    if found is not None:
                        return found
        return 0, 0, False


def _knows_nothing(value: object) -> None:
    return None


def _type_name(exc_type: type[BaseException]) -> str:
    return semconv.qualified_type(exc_type.__module__, exc_type.__qualname__)


#: Where OTel's ``LoggingHandler`` lives: the SDK's (deprecated) and its successor in
#: opentelemetry-instrumentation-logging, which logging auto-instrumentation installs.
_OTEL_HANDLER_MODULES = ("opentelemetry.sdk.", "opentelemetry.instrumentation.logging.")


def _sdk_handler_receives(name: str) -> bool:
    """Whether records of logger ``name`` already reach an OTel ``LoggingHandler``
    (``opentelemetry-instrument`` with logging auto-instrumentation, say)."""
    current: logging.Logger | None = logging.getLogger(name)
    while current is not None:
        for handler in current.handlers:
            kind = type(handler)
            if kind.__name__ == "LoggingHandler" and kind.__module__.startswith(
                _OTEL_HANDLER_MODULES
            ):
                return True
        current = current.parent if current.propagate else None
    return False


class _ProcessHandler(logging.Handler):
    """The one handler of the process: hands each record to the first sink attached."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.sinks: list[PythonLogs] = []
        #: Loggers the handler was added to, by name.
        self.installed: set[str] = set()
        self._busy = threading.local()
        #: The last record handled: a record propagating through two of our loggers
        #: (``distributed`` and ``distributed.worker`` both listed) is exported once.
        self._last: logging.LogRecord | None = None

    def emit(self, record: logging.LogRecord) -> None:
        sinks = self.sinks
        if not sinks or record is self._last or getattr(self._busy, "on", False):
            return
        sink = sinks[0]
        if record.levelno < sink.level:
            return
        self._last = record
        self._busy.on = True  # what our own code logs meanwhile is not exported again
        try:
            sink.handle(record)
        except Exception:
            sink.errors += 1
        finally:
            self._busy.on = False

    def handleError(self, record: logging.LogRecord) -> None:
        """Never print a traceback to stderr for a record of someone else's."""


_handler = _ProcessHandler()
_lock = threading.Lock()


def attach(sink: PythonLogs) -> bool:
    """Export the records of ``sink.settings.loggers`` through ``sink`` (or through the
    sink attached before it, in this process). False when the process's logging already
    goes to an OTel SDK handler: then it stays the only one, and nothing is attached."""
    names = sink.settings.loggers
    if any(_sdk_handler_receives(name) for name in names):
        logger.info(
            "otel-spans: Python logs of %s already go to an OpenTelemetry LoggingHandler; "
            "not exported a second time",
            ", ".join(names),
        )
        return False
    with _lock:
        _handler.sinks.append(sink)
        for name in names:
            if name not in _handler.installed:
                logging.getLogger(name).addHandler(_handler)
                _handler.installed.add(name)
    return True


def detach(sink: PythonLogs) -> None:
    """Stop exporting through ``sink``; the handler leaves the loggers with the last one."""
    with _lock:
        if sink in _handler.sinks:
            _handler.sinks.remove(sink)
        # A closed scheduler can live on (see Signals._release_metrics): its sink must
        # not keep the scheduler-side lookups, and what they hold, alive with it.
        sink._about = _knows_nothing
        if not _handler.sinks:
            for name in _handler.installed:
                logging.getLogger(name).removeHandler(_handler)
            _handler.installed.clear()
            _handler._last = None
