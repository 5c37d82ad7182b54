"""The typed settings: plain frozen dataclasses, and nothing that reads configuration.

:mod:`otel_spans.config` resolves them from dask.config and the ``OTEL_*`` variables;
everything else only reads them. This module imports nothing of dask, distributed or
tornado, so that ``export/`` and ``telemetry/`` can take their settings from here and
still never import Dask, not even through a shared module
(``tests/unit/test_architecture.py`` follows imports transitively).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

from otel_spans.redact import redact_url, shown_headers
from otel_spans.sampler import TraceSampler

#: Most workflow attributes that become metric attributes (each multiplies the series).
MAX_ATTRIBUTE_LABELS = 4

Protocol = Literal["grpc", "http/protobuf"]
ExporterKind = Literal["otlp", "file", "none"]
PROTOCOLS: tuple[Protocol, ...] = ("grpc", "http/protobuf")
EXPORTERS: tuple[ExporterKind, ...] = ("otlp", "file", "none")
#: Seconds one export call may take by default (``otel-spans.timeout``).
DEFAULT_TIMEOUT = 10.0
#: Longest attribute value by default (``otel-spans.max-attribute-length``).
DEFAULT_MAX_ATTRIBUTE_LENGTH = 4096
#: The OTel specification's default for every span count limit.
DEFAULT_COUNT_LIMIT = 128
#: Seconds a batch of spans, and of log records, waits to fill before it is sent
#: (``traces.batch-wait``, ``logs.batch-wait``): the OTel specification's defaults of
#: ``OTEL_BSP_SCHEDULE_DELAY`` and ``OTEL_BLRP_SCHEDULE_DELAY``. A request has a fixed
#: cost (a gRPC call is about half a millisecond of CPU), which a service running one
#: small workflow after another pays per batch; close() and a full batch never wait.
DEFAULT_TRACES_BATCH_WAIT = 5.0
DEFAULT_LOGS_BATCH_WAIT = 1.0
#: Seconds that stand for "no limit" (a timeout of 0) where a library needs a number:
#: a year, longer than any export and shorter than what ``threading`` and gRPC accept.
NO_LIMIT_SECONDS = 365 * 24 * 3600.0


def bounded(seconds: float) -> float:
    """A timeout as a library takes it: "no limit" (``math.inf``) becomes a year."""
    return min(seconds, NO_LIMIT_SECONDS)


class ConfigError(ValueError):
    """A configuration value is invalid; the message names key, value and what is allowed.

    Defined here, beside the settings, so that code that may not import Dask (the
    telemetry's start, which can fail on a port in use) raises the same error.
    """


@dataclass(frozen=True, repr=False)
class ExportTarget:
    """Where one signal goes and how. Its ``repr`` hides header values and the
    endpoint's password (it ends up in tracebacks and debug logs)."""

    kind: ExporterKind
    #: Full URL for OTLP (for http/protobuf including the /v1/<signal> path).
    endpoint: str | None = None
    protocol: Protocol = "grpc"
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Seconds one export call may take, retries included; ``math.inf``: no limit
    #: (pass it to libraries through :func:`bounded`).
    timeout: float = DEFAULT_TIMEOUT
    compression: Literal["gzip"] | None = None
    certificate: str | None = None
    client_certificate: str | None = None
    client_key: str | None = None
    insecure: bool | None = None
    #: For kind "file": the directory the OTLP/JSON files go to.
    directory: Path = Path("otel-spans-data")
    #: For kind "file": most bytes of otel-spans files under ``directory`` (the oldest
    #: are deleted, and counted, to stay under it), and most bytes of one file before
    #: it is rotated.
    directory_max_bytes: int = 256 * 1024 * 1024
    directory_max_file_bytes: int = 16 * 1024 * 1024
    #: Also print every record to standard output (the OTel ``console`` exporter).
    console: bool = False

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        shown["headers"] = shown_headers(self.headers)
        shown["endpoint"] = None if self.endpoint is None else redact_url(self.endpoint)
        return f"ExportTarget({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    @property
    def enabled(self) -> bool:
        """Whether the signal goes anywhere at all."""
        return self.kind != "none" or self.console

    def describe(self) -> str:
        """Where the data goes, for log lines; never includes header values or the
        endpoint's password."""
        if self.kind == "otlp":
            where = f"OTLP {self.protocol} {redact_url(str(self.endpoint))}"
        elif self.kind == "file":
            where = f"OTLP/JSON files in {self.directory.resolve()}"
        else:
            return "the console" if self.console else "nowhere (exporter none)"
        return where + " and the console" if self.console else where


#: How many of a span's task runs become spans (see :mod:`otel_spans.scheduler.sampling`).
TaskMode = Literal["none", "sampled", "all"]
TASK_MODES: tuple[TaskMode, ...] = ("none", "sampled", "all")


@dataclass(frozen=True)
class TaskRule:
    """Task-span mode for the Dask spans whose "/"-joined tags match ``match``."""

    match: str
    mode: TaskMode


@dataclass(frozen=True)
class TaskSettings:
    mode: TaskMode
    slowest: int
    ratio: float
    max_per_trace: int
    #: Seconds: runs that computed for less are sampled only for a reason (erred, ...).
    min_duration: float
    rules: tuple[TaskRule, ...]


#: ``logs.python.level`` names, as the ``logging`` module numbers them.
PYTHON_LOG_LEVELS: dict[str, int] = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
}


@dataclass(frozen=True)
class PythonLogSettings:
    """Which records of Python's ``logging`` become OTel log records."""

    #: Loggers (with their children) whose records are exported.
    loggers: tuple[str, ...]
    #: Lowest ``logging`` level exported; None: no Python log record is.
    level: int | None
    #: Most records exported per second and process; the rest are counted.
    max_per_second: int

    @property
    def enabled(self) -> bool:
        return self.level is not None and bool(self.loggers) and self.max_per_second > 0


@dataclass(frozen=True)
class LogSettings:
    target: ExportTarget
    topics: tuple[str, ...]
    exclude_topics: tuple[str, ...]
    erred_tasks: bool
    python: PythonLogSettings
    #: Longest a batch of log records waits to fill before it is sent (seconds).
    batch_wait: float = DEFAULT_LOGS_BATCH_WAIT


@dataclass(frozen=True)
class TraceSettings:
    target: ExportTarget
    #: Seconds a finished Dask span must stay finished before it is exported.
    linger: float
    #: Seconds between two looks at the open spans.
    poll_interval: float
    #: Longest code snippet kept (characters); 0 keeps no snippet, only its location.
    code_max_length: int
    tasks: TaskSettings
    max_error_stories: int
    #: Client side default of ``otel_spans.span(link=None)``.
    caller_link: bool
    #: The one sampling decision per trace (``OTEL_TRACES_SAMPLER``), the same on the
    #: scheduler and the workers; parent-based by default: a workflow joining an
    #: unsampled caller's trace is not exported (its metrics are).
    sampler: TraceSampler = field(default_factory=TraceSampler)
    #: Longest a batch of spans waits to fill before it is sent (seconds): the
    #: scheduler's traces pipeline and the workers' span batch processor.
    batch_wait: float = DEFAULT_TRACES_BATCH_WAIT


Temporality = Literal["cumulative", "delta", "lowmemory"]
TEMPORALITIES: tuple[Temporality, ...] = ("cumulative", "delta", "lowmemory")


@dataclass(frozen=True)
class MetricsSettings:
    target: ExportTarget
    #: Seconds between two readings (and exports) of the metrics.
    interval: float
    temporality: Temporality
    #: Port of the Prometheus pull endpoint (0: any free port); None: no endpoint.
    prometheus_port: int | None
    prometheus_host: str
    max_span_names: int
    max_prefixes: int
    #: The SDK's cardinality limit per instrument (series kept before folding).
    max_series: int
    #: Seconds a finished span keeps being read for late worker heartbeats.
    settle: float
    cpu_hour_price: float | None
    currency: str
    #: Workflow attributes (``team``, ``pipeline``) that are also metric attributes.
    attribute_labels: tuple[str, ...] = ()
    #: Distinct values each of them takes at most before ``(overflow)``.
    max_attribute_values: int = 100
    #: Seconds one collection and export of the metrics may take (``math.inf``: no
    #: limit); the OTLP exporter's own ``timeout`` bounds each of its requests.
    export_timeout: float = 30.0
    #: Distinct worker addresses of the worker memory gauges before ``(overflow)``.
    max_workers: int = 256


@dataclass(frozen=True)
class RecordLimits:
    """The OTel attribute and span limits, applied to every span and log record
    otel-spans builds (as the SDK would), each from its own ``OTEL_*`` variable."""

    #: Longest string attribute value, span name and status message (characters).
    attribute_length: int = DEFAULT_MAX_ATTRIBUTE_LENGTH
    #: Most attributes per span.
    attribute_count: int = DEFAULT_COUNT_LIMIT
    events: int = DEFAULT_COUNT_LIMIT
    links: int = DEFAULT_COUNT_LIMIT
    #: Most attributes per span event, and per link.
    event_attribute_count: int = DEFAULT_COUNT_LIMIT
    link_attribute_count: int = DEFAULT_COUNT_LIMIT
    #: Longest attribute value (and body) of a log record, and most attributes on one.
    log_attribute_length: int = DEFAULT_MAX_ATTRIBUTE_LENGTH
    log_attribute_count: int = DEFAULT_COUNT_LIMIT


CodeCapture = Literal["snippet", "location", "none"]
CODE_CAPTURES: tuple[CodeCapture, ...] = ("snippet", "location", "none")
ExceptionCapture = Literal["message", "type"]
EXCEPTION_CAPTURES: tuple[ExceptionCapture, ...] = ("message", "type")


@dataclass(frozen=True)
class CaptureSettings:
    """What of the user's code and errors may leave the cluster (task data never does)."""

    #: Client code that created a span or computation: the snippet with its file and
    #: line, the file and line only, or nothing.
    code: CodeCapture = "snippet"
    #: Erred tasks: exception type, message and stack trace, or the type alone.
    exceptions: ExceptionCapture = "message"


@dataclass(frozen=True)
class DiagnosisSettings:
    """Which finished workflows the scheduler diagnoses (critical path, findings)."""

    #: Seconds: a finished workflow whose wall time is shorter is not diagnosed,
    #: unless a task of it erred.
    min_duration: float = 1.0


@dataclass(frozen=True)
class ProfileSettings:
    """Dask's statistical profile of each finished workflow's busiest task prefixes."""

    enabled: bool = False
    #: Prefixes profiled per workflow, the busiest first.
    prefixes: int = 5
    #: Longest folded-stack text of one prefix (characters).
    max_length: int = 65536


@dataclass(frozen=True)
class Settings:
    """Everything otel-spans reads from configuration, resolved and checked once
    (``otel_spans.config.Settings.from_config`` builds it)."""

    enabled: bool
    service_name: str | None
    cluster_name: str | None
    #: A template with {trace_id} (and optionally {span_id}) linking to a trace.
    trace_url: str | None
    resource_attributes: Mapping[str, str]
    queue_size: int
    batch_size: int
    shutdown_timeout: float
    traces: TraceSettings
    metrics: MetricsSettings
    logs: LogSettings
    capture: CaptureSettings = CaptureSettings()
    record_limits: RecordLimits = RecordLimits()
    #: On every workflow's Dask spans (``workflow-attributes``), sorted by key.
    workflow_attributes: tuple[tuple[str, str | bool | int | float], ...] = ()
    profile: ProfileSettings = ProfileSettings()
    diagnosis: DiagnosisSettings = DiagnosisSettings()
    #: ``service.namespace`` (``service-namespace``); None: OTEL_RESOURCE_ATTRIBUTES'.
    service_namespace: str | None = None

    @property
    def code_snippet_length(self) -> int:
        """Characters of client code kept per snippet: 0 unless ``capture.code`` is snippet."""
        return self.traces.code_max_length if self.capture.code == "snippet" else 0

    @property
    def max_attribute_length(self) -> int:
        """Longest string value of any attribute or log body otel-spans emits."""
        return self.record_limits.attribute_length


def format_trace_url(template: str, trace_id: int, span_id: int) -> str:
    """``otel-spans.trace-url`` filled in with W3C-format (lowercase hex) ids."""
    return template.format(trace_id=f"{trace_id:032x}", span_id=f"{span_id:016x}")
