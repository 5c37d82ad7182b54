"""Every ``otel-spans`` setting, once: key, parser with its bounds, default, the
``OTEL_*`` variables it falls back to, and one line of description.

This table is the configuration's single description, as distributed's
``distributed-schema.yaml`` is Dask's: validation, the layered lookup
(:mod:`.resolve`), the keys allowed, the ``OTEL_*`` variables read and the key table of
``docs/configuration.md`` all come from it. The shipped values stay in
``otel-spans.yaml`` (dask.config's defaults file); ``tests/unit/test_config_table.py`` checks
that the yaml, this table and the docs agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from otel_spans.config.parsers import (
    Boolean,
    ByteSize,
    Choice,
    Currency,
    Duration,
    Exporters,
    FollowCaller,
    Integer,
    Number,
    OtlpProtocol,
    Parser,
    Port,
    ReadableFile,
    Text,
    Timeout,
    Url,
)
from otel_spans.config.structured import (
    AttributeLabels,
    AttributeMap,
    Globs,
    LoggerNames,
    LogLevel,
    StringMap,
    TaskRules,
    TraceUrl,
)
from otel_spans.sampler import SAMPLERS
from otel_spans.settings import (
    CODE_CAPTURES,
    EXCEPTION_CAPTURES,
    EXPORTERS,
    PROTOCOLS,
    TASK_MODES,
    TEMPORALITIES,
)

SIGNALS = ("traces", "metrics", "logs")
#: Port of the Prometheus endpoint that ``OTEL_METRICS_EXPORTER=prometheus`` serves when
#: ``OTEL_EXPORTER_PROMETHEUS_PORT`` is not set (the OTel specification's default).
PROMETHEUS_DEFAULT_PORT = 9464


@dataclass(frozen=True)
class Setting:
    """One row: an ``otel-spans`` key and everything there is to know about it."""

    #: Dotted key under ``otel-spans`` (``traces.tasks.slowest``).
    key: str
    parse: Parser
    #: As a dask.config value ("5s", not 5.0). Where a variable applies, the yaml ships
    #: null (so that the variable is read) and this is the value when none is set.
    default: Any
    #: One line for the docs table.
    doc: str
    #: (signal-specific variable, general variable), looked up in that order after the
    #: key; ``{SIGNAL}`` is TRACES, METRICS or LOGS.
    env: tuple[str | None, str | None] = (None, None)
    #: Whether null is "not set here" (the next layer decides). Default: when a variable
    #: applies or the default is null. Otherwise null is handed to the parser.
    nullable: bool | None = None
    #: The variable can only turn the setting off (``OTEL_SDK_DISABLED``): the value is
    #: the key's, and false when the variable says true.
    env_disables: bool = False

    @property
    def null_is_unset(self) -> bool:
        if self.nullable is not None:
            return self.nullable
        return self.env != (None, None) or self.default is None

    @property
    def shipped(self) -> Any:
        """The value ``otel-spans.yaml`` must ship for this key."""
        return None if self.env != (None, None) and not self.env_disables else self.default

    def variables(self, signal: str | None = None) -> list[str]:
        """The variables to look at, in order (``{SIGNAL}`` filled in)."""
        return [
            name.format(SIGNAL=(signal or "").upper()) if "{SIGNAL}" in name else name
            for name in self.env
            if name is not None
        ]


def _otlp(option: str) -> tuple[str, str]:
    return f"OTEL_EXPORTER_OTLP_{{SIGNAL}}_{option}", f"OTEL_EXPORTER_OTLP_{option}"


_COUNT = Integer(minimum=0)
#: How long an exporter waits for a batch to fill: > 0 (0 would send without pause),
#: at most a minute (records held longer than that are records a crash loses).
_BATCH_WAIT = Duration(
    positive=True, maximum=60.0, allowed="a positive duration such as 5s or 200ms, at most 60s"
)
_POSITIVE = Integer(minimum=1)
_EXPORTER_CHOICES = (*EXPORTERS, "console")


def _signal_rows(signal: str) -> list[Setting]:
    aliases = ("prometheus",) if signal == "metrics" else ()
    env_names = ", ".join(("otlp", *aliases, "none"))
    return [
        Setting(
            f"{signal}.exporter",
            Exporters(
                choices=_EXPORTER_CHOICES,
                allowed="one of " + ", ".join(_EXPORTER_CHOICES),
                env_choices=("otlp", "console", "none", *aliases),
            ),
            None,
            f"where {signal} go; null: OTEL_{signal.upper()}_EXPORTER ({env_names}), then "
            "otlp with an endpoint and file without",
            env=(f"OTEL_{signal.upper()}_EXPORTER", None),
        ),
        Setting(
            f"{signal}.endpoint",
            Url(),
            None,
            f"{signal}' own endpoint, used as is (no /v1/{signal} appended); null: `endpoint`",
        ),
    ]


ROWS: tuple[Setting, ...] = (
    # -- on/off and resource
    Setting("enabled", Boolean(), True, "false turns otel-spans off entirely",
            env=(None, "OTEL_SDK_DISABLED"), nullable=False, env_disables=True),
    Setting("service-name", Text(), None, "service.name of everything exported (else dask)",
            env=(None, "OTEL_SERVICE_NAME")),
    Setting("service-namespace", Text(), None,
            "service.namespace of everything exported (else OTEL_RESOURCE_ATTRIBUTES')"),
    Setting("cluster-name", Text(), None, "dask.cluster.name resource attribute"),
    Setting("trace-url", TraceUrl(), None,
            "link to a workflow's trace in your tracing UI, with {trace_id}"),
    Setting("resource-attributes", StringMap(), {},
            "extra resource attributes, merged over OTEL_RESOURCE_ATTRIBUTES", nullable=True),
    Setting("workflow-attributes", AttributeMap(), {},
            "attributes on every workflow's Dask spans", nullable=True),
    # -- where to send it
    Setting("endpoint", Url(), None,
            "OTLP endpoint (for http/protobuf the base URL); none anywhere: files",
            env=_otlp("ENDPOINT")),
    Setting("protocol", OtlpProtocol(choices=PROTOCOLS), "grpc", "OTLP transport",
            env=_otlp("PROTOCOL")),
    Setting("headers", StringMap(secret=True), {}, "extra request headers (values never logged)",
            env=_otlp("HEADERS")),
    Setting("timeout", Timeout(), "10s",
            "deadline of one export call, retries included (variables: milliseconds)",
            env=_otlp("TIMEOUT")),
    Setting("compression", Choice(choices=("gzip", "none")), "none", "OTLP compression",
            env=_otlp("COMPRESSION")),
    Setting("certificate", ReadableFile(), None, "CA bundle to trust (TLS)",
            env=_otlp("CERTIFICATE")),
    Setting("client-certificate", ReadableFile(), None, "client certificate (mutual TLS)",
            env=_otlp("CLIENT_CERTIFICATE")),
    Setting("client-key", ReadableFile(), None, "client key (mutual TLS)",
            env=_otlp("CLIENT_KEY")),
    Setting("insecure", Boolean(), None,
            "gRPC endpoint without a scheme: plain text (true) or TLS (false, the default); "
            "a scheme decides otherwise", env=_otlp("INSECURE")),
    Setting("directory", Text(), "otel-spans-data",
            "where OTLP/JSON files go when no endpoint is configured", nullable=True),
    Setting("directory-max-bytes", ByteSize(), "256MiB",
            "most bytes of otel-spans' files under directory; the oldest are deleted, counted"),
    Setting("directory-max-file-bytes", ByteSize(), "16MiB",
            "a file is rotated before it passes this size; at most directory-max-bytes"),
    # -- protecting the cluster
    Setting("queue-size", _POSITIVE, 8192, "records waiting per signal; more are dropped"),
    Setting("batch-size", _POSITIVE, 512, "records per export call"),
    Setting("shutdown-timeout", Duration(), "5s",
            "longest flush at scheduler shutdown; the rest is counted as dropped"),
    Setting("max-attribute-length", _POSITIVE, 4096, "longest attribute value (characters)",
            env=("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")),
    Setting("max-attribute-count", _COUNT, 128, "most attributes per span",
            env=("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT")),
    Setting("max-events", _COUNT, 128, "most events per span",
            env=("OTEL_SPAN_EVENT_COUNT_LIMIT", None)),
    Setting("max-links", _COUNT, 128, "most links per span",
            env=("OTEL_SPAN_LINK_COUNT_LIMIT", None)),
    Setting("max-event-attribute-count", _COUNT, 128, "most attributes per span event",
            env=("OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT")),
    Setting("max-link-attribute-count", _COUNT, 128, "most attributes per span link",
            env=("OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT")),
    Setting("max-log-attribute-length", _POSITIVE, 4096,
            "longest log record attribute value and body (characters)",
            env=("OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT",
                 "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")),
    Setting("max-log-attribute-count", _COUNT, 128, "most attributes per log record",
            env=("OTEL_LOGRECORD_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT")),
    # -- what may leave the cluster
    Setting("capture.code", Choice(choices=CODE_CAPTURES), "snippet",
            "client code on spans: snippet with file and line, location only, or none"),
    Setting("capture.exceptions", Choice(choices=EXCEPTION_CAPTURES), "message",
            "erred tasks: type, message and stack trace, or the type alone"),
    # -- traces
    *_signal_rows("traces"),
    Setting("traces.linger", Duration(), "2s",
            "how long a finished Dask span stays finished before it is exported"),
    Setting("traces.poll-interval", Duration(positive=True), "500ms",
            "how often the scheduler looks for finished spans"),
    Setting("traces.batch-wait", _BATCH_WAIT, "5s",
            "longest a batch of spans waits to fill before it is sent (variable: milliseconds)",
            env=(None, "OTEL_BSP_SCHEDULE_DELAY")),
    Setting("traces.code-max-length", _COUNT, 2000,
            "longest client code snippet kept (characters)"),
    Setting("traces.tasks.mode", Choice(choices=TASK_MODES), "sampled",
            "which finished tasks get a span of their own"),
    Setting("traces.tasks.slowest", _COUNT, 5, "sampled: the slowest tasks kept per group"),
    Setting("traces.tasks.ratio",
            Number(minimum=0.0, maximum=1.0, allowed="a number from 0 to 1"), 0.0,
            "sampled: the share of the other tasks kept, by a hash of the key"),
    Setting("traces.tasks.min-duration", Duration(), "1ms",
            "sampled: runs shorter than this are kept only for a reason (erred...)"),
    Setting("traces.tasks.max-per-trace", _COUNT, 10000, "hard cap of task spans per trace"),
    Setting("traces.tasks.rules", TaskRules(), [],
            "per-span modes, first match wins: {match: <glob>, mode: ...}", nullable=True),
    Setting("traces.caller-link", Boolean(), False,
            "client side: true gives each workflow a trace of its own, linked to the caller"),
    Setting("traces.sampler", Choice(choices=SAMPLERS), "parentbased_always_on",
            "one decision per trace, the same for the scheduler's and task code's spans",
            env=(None, "OTEL_TRACES_SAMPLER")),
    Setting("traces.sampler-arg",
            Number(minimum=0.0, maximum=1.0, allowed="a number from 0 to 1"), 1.0,
            "the share of traces the ratio samplers keep (by trace id)",
            env=(None, "OTEL_TRACES_SAMPLER_ARG")),
    Setting("traces.follow-caller-sampling", FollowCaller(), None,
            "deprecated: false is traces.sampler always_on, true parentbased_always_on"),
    Setting("traces.max-error-stories", _COUNT, 10,
            "erred tasks per Dask span whose transition story becomes span events"),
    # -- metrics
    *_signal_rows("metrics"),
    Setting("metrics.interval", Duration(positive=True), "15s",
            "how often metrics are read and exported (variable: milliseconds)",
            env=(None, "OTEL_METRIC_EXPORT_INTERVAL")),
    Setting("metrics.export-timeout", Timeout(), "30s",
            "longest collection and export of the metrics (variable: milliseconds)",
            env=(None, "OTEL_METRIC_EXPORT_TIMEOUT")),
    Setting("metrics.temporality", Choice(choices=TEMPORALITIES), "cumulative",
            "aggregation temporality of exported metrics",
            env=(None, "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE")),
    Setting("metrics.prometheus-port", Port(), None,
            "Prometheus pull endpoint on the scheduler (0: a free port); null: off, unless "
            f"OTEL_METRICS_EXPORTER names prometheus (then {PROMETHEUS_DEFAULT_PORT})",
            env=(None, "OTEL_EXPORTER_PROMETHEUS_PORT")),
    Setting("metrics.prometheus-host", Text(), "localhost",
            "interface the Prometheus endpoint binds (0.0.0.0: every one)",
            env=(None, "OTEL_EXPORTER_PROMETHEUS_HOST")),
    Setting("metrics.max-span-names", _POSITIVE, 1000,
            "distinct span names that become attribute values, then (overflow)"),
    Setting("metrics.max-prefixes", _POSITIVE, 1000,
            "distinct task prefixes that become attribute values, then (overflow)"),
    Setting("metrics.max-workers", _POSITIVE, 256,
            "distinct worker addresses of the worker memory gauges, then (overflow)"),
    Setting("metrics.max-series", _POSITIVE, 5000, "most series one instrument exports"),
    Setting("metrics.settle", Duration(), "5s",
            "how long a finished span is still read for late worker heartbeats"),
    Setting("metrics.cpu-hour-price",
            Number(minimum=0.0, maximum=math.inf, allowed="a number >= 0 or null"), None,
            "price of one CPU hour; when set, cost metrics are reported"),
    Setting("metrics.currency", Currency(), "USD", "currency of that price", nullable=True),
    Setting("metrics.attribute-labels", AttributeLabels(), [],
            "workflow attributes that are also metric attributes", nullable=True),
    Setting("metrics.max-attribute-values", _POSITIVE, 100,
            "distinct values of each such attribute, then (overflow)"),
    # -- logs
    *_signal_rows("logs"),
    Setting("logs.batch-wait", _BATCH_WAIT, "1s",
            "longest a batch of log records waits to fill before it is sent (variable: "
            "milliseconds)", env=(None, "OTEL_BLRP_SCHEDULE_DELAY")),
    Setting("logs.topics", Globs(), ["*"], "Dask event topics exported as log records"),
    Setting("logs.exclude-topics", Globs(), [], "...unless they match one of these"),
    Setting("logs.erred-tasks", Boolean(), True, "one ERROR log record per erred task"),
    Setting("logs.python.loggers", LoggerNames(), ["distributed"],
            "Python loggers (and children) whose records are exported"),
    Setting("logs.python.level", LogLevel(), "WARNING", "lowest level exported, or none"),
    Setting("logs.python.max-per-second", _COUNT, 100,
            "most Python log records exported per second and process"),
    # -- workflow diagnosis
    Setting("diagnosis.min-duration", Duration(), "1s",
            "finished workflows shorter than this are not diagnosed, unless a task erred"),
    # -- hot code
    Setting("profile", Boolean(), False,
            "profile each finished workflow's busiest task prefixes (dask.profile records)"),
    Setting("profile-prefixes", Integer(minimum=1, maximum=100), 5,
            "prefixes profiled per workflow"),
    Setting("profile-max-length", Integer(minimum=1024), 65536,
            "longest folded-stack text per prefix (characters)"),
)  # fmt: skip

#: The rows by key.
SETTINGS: Mapping[str, Setting] = {row.key: row for row in ROWS}

#: Every ``OTEL_*`` variable otel-spans reads, by key: (signal-specific, general), looked
#: up in that order after the key. Derived from the table, so what is read is greppable.
OTEL_VARIABLES: Mapping[str, tuple[str | None, str | None]] = {
    row.key: row.env for row in ROWS if row.env != (None, None)
}


def allowed_keys() -> dict[str, Any]:
    """The tree of allowed keys: sections are dicts, settings are their rows."""
    tree: dict[str, Any] = {}
    for row in ROWS:
        *sections, leaf = row.key.split(".")
        node = tree
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = row
    return tree
