"""Settings, read once from dask.config and the standard ``OTEL_*`` variables.

Every setting resolves in one expression: the ``otel-spans`` dask.config key when it
is not null, then the signal-specific ``OTEL_*`` variable, then the general one, then
the default (see ``otel-spans.yaml`` for each). Validation is eager: a bad value of an
``otel-spans`` key raises :class:`ConfigError` naming the key, the value and what is
allowed, so a misconfigured scheduler fails at start instead of exporting nothing.

``OTEL_*`` variables are different: they are process-wide, often set for other code in
the same container, and the OTel SDK configuration specification says an invalid or
unsupported value is warned about and ignored. So they never raise: a bad one is logged
once and the setting falls back to the value it would have without the variable
(docs/configuration.md lists each variable and what otel-spans does with it).
"""

from __future__ import annotations

import logging
import os
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import dask.config
import yaml
from dask.utils import parse_bytes, parse_timedelta
from opentelemetry.util.re import parse_env_headers

from otel_spans.records import workflow_attributes

#: Most workflow attributes that become metric attributes (each multiplies the series).
MAX_ATTRIBUTE_LABELS = 4

NAMESPACE = "otel-spans"
logger = logging.getLogger(__name__)
_DEFAULTS_FILE = Path(__file__).with_name("otel-spans.yaml")

Protocol = Literal["grpc", "http/protobuf"]
ExporterKind = Literal["otlp", "file", "none"]
_PROTOCOLS: tuple[Protocol, ...] = ("grpc", "http/protobuf")
_EXPORTERS: tuple[ExporterKind, ...] = ("otlp", "file", "none")
#: The ``otel-spans.<signal>.exporter`` values: ours, plus the OTel console exporter.
_EXPORTER_CHOICES: tuple[str, ...] = (*_EXPORTERS, "console")
#: What an ``OTEL_<SIGNAL>_EXPORTER`` list may name (plus per-signal aliases).
_ENV_EXPORTERS: tuple[str, ...] = ("otlp", "console", "none")
_COMPRESSIONS: tuple[str, ...] = ("gzip", "none")
_DEFAULT_TIMEOUT = 10.0
_DEFAULT_MAX_ATTRIBUTE_LENGTH = 4096
#: The OTel specification's default for every span count limit.
_DEFAULT_COUNT_LIMIT = 128


class ConfigError(ValueError):
    """A configuration value is invalid; the message names key, value and what is allowed."""


#: (variable, value) pairs already warned about: each is said once per process, however
#: many schedulers, workers and clients resolve the settings.
_WARNED: set[tuple[str, str]] = set()
_WARNED_LOCK = threading.Lock()


def warn_ignored(name: str, value: str, why: str) -> None:
    """Log once that an ``OTEL_*`` variable's value is ignored, and why."""
    with _WARNED_LOCK:
        if (name, value) in _WARNED:
            return
        _WARNED.add((name, value))
    logger.warning("otel-spans: ignoring %s: %s", name, why)


def load_defaults() -> dict[str, Any]:
    """The defaults shipped in ``otel-spans.yaml`` (a fresh copy)."""
    with _DEFAULTS_FILE.open() as f:
        data: dict[str, Any] = yaml.safe_load(f)
    return data


def register_defaults() -> None:
    """Register the shipped defaults with dask.config without overriding user values."""
    dask.config.update_defaults(load_defaults())


@dataclass(frozen=True)
class ExportTarget:
    """Where one signal goes and how."""

    kind: ExporterKind
    #: Full URL for OTLP (for http/protobuf including the /v1/<signal> path).
    endpoint: str | None = None
    protocol: Protocol = "grpc"
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Seconds one export call may take, retries included.
    timeout: float = _DEFAULT_TIMEOUT
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

    @property
    def enabled(self) -> bool:
        """Whether the signal goes anywhere at all."""
        return self.kind != "none" or self.console

    def describe(self) -> str:
        """Where the data goes, for log lines; never includes header values."""
        if self.kind == "otlp":
            where = f"OTLP {self.protocol} {self.endpoint}"
        elif self.kind == "file":
            where = f"OTLP/JSON files in {self.directory.resolve()}"
        else:
            return "the console" if self.console else "nowhere (exporter none)"
        return where + " and the console" if self.console else where


#: How many of a span's task runs become spans (see :mod:`otel_spans.scheduler.sampling`).
TaskMode = Literal["none", "sampled", "all"]
_TASK_MODES: tuple[TaskMode, ...] = ("none", "sampled", "all")


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
    #: Parent-based sampling: a workflow joining an unsampled caller's trace is not
    #: exported (its metrics are); false exports every workflow whatever the caller says.
    follow_caller_sampling: bool = True


Temporality = Literal["cumulative", "delta", "lowmemory"]
_TEMPORALITIES: tuple[Temporality, ...] = ("cumulative", "delta", "lowmemory")
_DEFAULT_METRIC_INTERVAL = 15.0
_DEFAULT_PROMETHEUS_PORT = 9464


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


@dataclass(frozen=True)
class RecordLimits:
    """The OTel attribute and span limits, applied to every span and log record
    otel-spans builds (as the SDK would)."""

    #: Longest string attribute value, span name and status message (characters).
    attribute_length: int = _DEFAULT_MAX_ATTRIBUTE_LENGTH
    #: Most attributes per span, event and link.
    attribute_count: int = _DEFAULT_COUNT_LIMIT
    events: int = _DEFAULT_COUNT_LIMIT
    links: int = _DEFAULT_COUNT_LIMIT


CodeCapture = Literal["snippet", "location", "none"]
_CODE_CAPTURES: tuple[CodeCapture, ...] = ("snippet", "location", "none")
ExceptionCapture = Literal["message", "type"]
_EXCEPTION_CAPTURES: tuple[ExceptionCapture, ...] = ("message", "type")


@dataclass(frozen=True)
class CaptureSettings:
    """What of the user's code and errors may leave the cluster (task data never does)."""

    #: Client code that created a span or computation: the snippet with its file and
    #: line, the file and line only, or nothing.
    code: CodeCapture = "snippet"
    #: Erred tasks: exception type, message and stack trace, or the type alone.
    exceptions: ExceptionCapture = "message"


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

    @property
    def code_snippet_length(self) -> int:
        """Characters of client code kept per snippet: 0 unless ``capture.code`` is snippet."""
        return self.traces.code_max_length if self.capture.code == "snippet" else 0

    @property
    def max_attribute_length(self) -> int:
        """Longest string value of any attribute or log body otel-spans emits."""
        return self.record_limits.attribute_length

    @classmethod
    def from_config(
        cls,
        overrides: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Settings:
        """Resolve the settings from dask.config (+ ``overrides``) and ``environ``."""
        raw = dask.config.merge(load_defaults()[NAMESPACE], dask.config.get(NAMESPACE, {}))
        if overrides:
            raw = dask.config.merge(raw, _canonical(dict(overrides)))
        return _Resolver(raw, os.environ if environ is None else environ).settings()


#: Every ``OTEL_*`` variable otel-spans reads, by setting: the signal-specific variable
#: (``{SIGNAL}`` is TRACES, METRICS or LOGS) and the general one, looked up in that order
#: after the ``otel-spans`` dask.config key. One table, so that what we read is greppable.
OTEL_VARIABLES: Mapping[str, tuple[str | None, str | None]] = {
    "enabled": (None, "OTEL_SDK_DISABLED"),
    "service-name": (None, "OTEL_SERVICE_NAME"),
    "exporter": ("OTEL_{SIGNAL}_EXPORTER", None),
    "endpoint": ("OTEL_EXPORTER_OTLP_{SIGNAL}_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
    "protocol": ("OTEL_EXPORTER_OTLP_{SIGNAL}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"),
    "headers": ("OTEL_EXPORTER_OTLP_{SIGNAL}_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"),
    "timeout": ("OTEL_EXPORTER_OTLP_{SIGNAL}_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"),
    "compression": ("OTEL_EXPORTER_OTLP_{SIGNAL}_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"),
    "certificate": ("OTEL_EXPORTER_OTLP_{SIGNAL}_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE"),
    "client-certificate": (
        "OTEL_EXPORTER_OTLP_{SIGNAL}_CLIENT_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
    ),
    "client-key": ("OTEL_EXPORTER_OTLP_{SIGNAL}_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY"),
    "insecure": ("OTEL_EXPORTER_OTLP_{SIGNAL}_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE"),
    "max-attribute-length": (
        "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
        "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    ),
    "max-attribute-count": ("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT"),
    "max-events": ("OTEL_SPAN_EVENT_COUNT_LIMIT", None),
    "max-links": ("OTEL_SPAN_LINK_COUNT_LIMIT", None),
    "traces.follow-caller-sampling": (None, "OTEL_TRACES_SAMPLER"),
    "metrics.interval": (None, "OTEL_METRIC_EXPORT_INTERVAL"),
    "metrics.temporality": (None, "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"),
    "metrics.prometheus-port": (None, "OTEL_EXPORTER_PROMETHEUS_PORT"),
    "metrics.prometheus-host": (None, "OTEL_EXPORTER_PROMETHEUS_HOST"),
}

T = TypeVar("T")
#: Parses one value: (the key or variable name it came from, the value) -> typed value.
Parse = Callable[[str, Any], T]


def _canonical(d: dict[str, Any]) -> dict[str, Any]:
    """dask.config accepts ``foo_bar`` for ``foo-bar``; so do we."""
    return {k.replace("_", "-"): _canonical(v) if isinstance(v, dict) else v for k, v in d.items()}


class _Resolver:
    """Turns the raw mapping into typed settings, failing on the first bad value."""

    def __init__(self, raw: Mapping[str, Any], environ: Mapping[str, str]):
        self.raw = _canonical(dict(raw))
        self.env = environ

    # -- the one lookup ----------------------------------------------------------------
    def get(self, key: str) -> Any:
        node: Any = self.raw
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        return node

    def env_var(self, setting: str, signal: str | None = None) -> tuple[str, str] | None:
        """The first ``OTEL_*`` variable of ``setting`` set (non-empty), as (name, value)."""
        specific, general = OTEL_VARIABLES[setting]
        names = [specific.format(SIGNAL=(signal or "").upper()) if specific else None, general]
        for name in names:
            value = self.env.get(name, "").strip() if name else ""
            if name and value:
                return name, value
        return None

    def layered(
        self,
        key: str,
        parse: Parse[T],
        default: T,
        *,
        parse_env: Parse[T] | None = None,
        setting: str | None = None,
        signal: str | None = None,
    ) -> T:
        """The ``key`` dask.config value when not null, else the signal-specific then the
        general ``OTEL_*`` variable of ``setting`` (default: ``key``), else ``default``.

        ``parse`` validates the dask.config value; ``parse_env`` (default ``parse``) the
        variable's text. A variable ``parse_env`` rejects is warned about once and
        ignored: the setting is then ``default``.
        """
        value = self.get(key)
        if value is not None:
            return parse(key, value)
        found = self.env_var(setting or key, signal) if (setting or key) in OTEL_VARIABLES else None
        if found is None:
            return default
        return self.from_env(found, parse_env or parse, default)

    @staticmethod
    def from_env(found: tuple[str, str], parse: Parse[T], default: T) -> T:
        """``parse`` the variable's text; on a bad value, warn once and use ``default``."""
        try:
            return parse(*found)
        except ConfigError as error:
            why = str(error).removeprefix(f"{found[0]}: ")
            warn_ignored(found[0], found[1], f"{why}; using the default")
            return default

    # -- value parsers -------------------------------------------------------------------
    @staticmethod
    def fail(key: str, value: Any, allowed: str) -> ConfigError:
        name = key if key.startswith("OTEL_") else f"{NAMESPACE}.{key}"
        return ConfigError(f"{name}: invalid value {value!r}; expected {allowed}")

    def boolean(self, key: str, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise self.fail(key, value, "true or false")

    @staticmethod
    def env_boolean(name: str, text: str) -> bool:
        """An ``OTEL_*`` boolean, per the specification: only ``true`` (any case) is true;
        anything but ``false`` or empty is also warned about."""
        value = text.strip().lower()
        if value not in ("true", "false", ""):
            warn_ignored(
                name, text, f"invalid value {text!r}; expected true or false; read as false"
            )
        return value == "true"

    def env_sampler(self, name: str, text: str) -> bool:
        """``OTEL_TRACES_SAMPLER`` as far as it applies to Dask spans: the scheduler
        samples task runs itself (``traces.tasks``); a workflow follows its caller's
        sampled flag (``parentbased_always_on``, the OTel default) or ignores it
        (``always_on``). Other samplers are warned about and ignored."""
        samplers = {"parentbased_always_on": True, "always_on": False}
        value = text.strip().lower()
        if value not in samplers:
            raise self.fail(name, text, " or ".join(samplers))
        return samplers[value]

    def env_choice(self, allowed: tuple[str, ...]) -> Parse[Any]:
        """An ``OTEL_*`` enum: case-insensitive, as the specification says."""
        strict = self.choice(allowed)
        return lambda name, text: strict(name, text.strip().lower())

    def duration(self, key: str, value: Any, *, positive: bool = False) -> float:
        try:
            if isinstance(value, bool):
                raise TypeError
            seconds = float(parse_timedelta(value, default="seconds"))
        except (TypeError, ValueError, KeyError, AttributeError):
            raise self.fail(
                key, value, "a duration such as 5s, 500ms or a number of seconds"
            ) from None
        if seconds < 0 or (positive and seconds == 0):
            raise self.fail(key, value, "a positive duration" if positive else ">= 0")
        return seconds

    def positive_duration(self, key: str, value: Any) -> float:
        return self.duration(key, value, positive=True)

    def millis_as_seconds(self, name: str, text: str) -> float:
        """An ``OTEL_*`` duration: milliseconds, as the OTel specification says."""
        try:
            millis = float(text)
        except ValueError:
            raise self.fail(name, text, "a positive number of milliseconds") from None
        if millis <= 0:
            raise self.fail(name, text, "a positive number of milliseconds")
        return millis / 1000

    def integer(self, key: str, value: Any, *, minimum: int, maximum: int | None = None) -> int:
        allowed = f"an integer >= {minimum}"
        if maximum is not None:
            allowed = f"an integer from {minimum} to {maximum}"
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise self.fail(key, value, allowed)
        try:
            number = int(value)
        except ValueError:
            raise self.fail(key, value, allowed) from None
        if number < minimum or (maximum is not None and number > maximum):
            raise self.fail(key, value, allowed)
        return number

    def byte_size(self, key: str, *, maximum: int | None = None) -> int:
        """A size in bytes: an integer or a string such as 16MiB, at least 1 KiB."""
        value = self.get(key)
        allowed = "a size such as 256MiB or a number of bytes, at least 1KiB"
        if maximum is not None:
            allowed += f" and at most directory-max-bytes ({maximum})"
        try:
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise TypeError
            size = int(parse_bytes(value))
        except (TypeError, ValueError):
            raise self.fail(key, value, allowed) from None
        if size < 1024 or (maximum is not None and size > maximum):
            raise self.fail(key, value, allowed)
        return size

    def count(self, key: str, value: Any) -> int:
        return self.integer(key, value, minimum=0)

    def port(self, key: str, value: Any) -> int:
        number = self.integer(key, value, minimum=0)
        if number > 65535:
            raise self.fail(key, value, "a port number from 0 to 65535")
        return number

    def choice(self, allowed: tuple[str, ...], text: str | None = None) -> Parse[Any]:
        """A parser accepting one of ``allowed``; says them all (or ``text``) in its error."""
        if text is None:
            text = ", ".join(allowed[:-1]) + f" or {allowed[-1]}"

        def parse(key: str, value: Any) -> Any:
            if value not in allowed:
                raise self.fail(key, value, text)
            return value

        return parse

    def text(self, key: str, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, value, "a non-empty string or null")
        return value

    def optional_str(self, key: str) -> str | None:
        value = self.get(key)
        return None if value is None else self.text(key, value)

    def string_map(self, key: str, value: Any) -> dict[str, str]:
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str | int | float | bool) for k, v in value.items()
        ):
            raise self.fail(key, value, "a mapping of string keys to string values")
        return {k: str(v) for k, v in value.items()}

    @staticmethod
    def env_map(name: str, text: str) -> dict[str, str]:
        """OTEL_*_HEADERS (W3C-baggage-like ``k=v,k2=v2``), parsed by the OTel SDK.

        Entries without ``key=`` are dropped with a warning first, naming the variable but
        not the entry: header values are often secrets, and the SDK's own warning would
        print them.
        """
        entries = [item for item in text.split(",") if item.strip()]
        kept = [item for item in entries if item.partition("=")[0].strip() and "=" in item]
        if len(kept) < len(entries):
            warn_ignored(
                name,
                text,
                f"{len(entries) - len(kept)} entry (value hidden) is not key=value; "
                "the other entries are used",
            )
        return dict(parse_env_headers(",".join(kept), liberal=True))

    def attribute_map(self, key: str) -> tuple[tuple[str, str | bool | int | float], ...]:
        value = self.get(key) or {}
        try:
            return workflow_attributes(dict(value) if isinstance(value, Mapping) else value)
        except ValueError as e:
            raise self.fail(key, value, f"a mapping of attribute names to values ({e})") from None

    def readable_file(self, key: str, value: Any) -> str:
        path = self.text(key, value)
        if not os.path.isfile(path):
            raise self.fail(key, path, "the path of a readable file")
        return path

    def url(self, key: str, value: Any) -> str:
        allowed = "an http:// or https:// URL with a host, e.g. http://collector:4317"
        if not isinstance(value, str):
            raise self.fail(key, value, allowed)
        try:
            parsed = urllib.parse.urlparse(value.strip())
            port = parsed.port  # raises ValueError on a bad port
        except ValueError:
            raise self.fail(key, value, allowed) from None
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise self.fail(key, value, allowed)
        del port
        return value.strip()

    def globs(self, key: str) -> tuple[str, ...]:
        value = self.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, value, "a list of glob patterns (strings)")
        return tuple(value)

    # -- keys ------------------------------------------------------------------------------
    def check_keys(self) -> None:
        allowed = load_defaults()[NAMESPACE]
        self._check_keys(self.raw, allowed, "")

    def _check_keys(self, raw: Mapping[str, Any], allowed: Mapping[str, Any], path: str) -> None:
        for key, value in raw.items():
            if key not in allowed:
                raise ConfigError(
                    f"{NAMESPACE}.{path}{key}: unknown key; "
                    f"allowed keys here: {', '.join(sorted(allowed))}"
                )
            if isinstance(allowed[key], dict) and key not in (
                "resource-attributes",
                "workflow-attributes",
                "headers",
            ):
                if not isinstance(value, Mapping):
                    raise self.fail(f"{path}{key}", value, "a mapping")
                self._check_keys(value, allowed[key], f"{path}{key}.")

    # -- composite settings ------------------------------------------------------------
    def settings(self) -> Settings:
        self.check_keys()
        enabled = self.boolean("enabled", self.get("enabled"))
        disabled = self.env_var("enabled")
        if disabled and self.env_boolean(*disabled):
            enabled = False
        return Settings(
            enabled=enabled,
            service_name=self.layered("service-name", self.text, None),
            cluster_name=self.optional_str("cluster-name"),
            trace_url=self.trace_url_template(),
            resource_attributes=self.string_map(
                "resource-attributes", self.get("resource-attributes") or {}
            ),
            workflow_attributes=self.attribute_map("workflow-attributes"),
            queue_size=self.integer("queue-size", self.get("queue-size"), minimum=1),
            batch_size=self.integer("batch-size", self.get("batch-size"), minimum=1),
            shutdown_timeout=self.duration("shutdown-timeout", self.get("shutdown-timeout")),
            traces=TraceSettings(
                target=self.target("traces"),
                linger=self.duration("traces.linger", self.get("traces.linger")),
                poll_interval=self.positive_duration(
                    "traces.poll-interval", self.get("traces.poll-interval")
                ),
                code_max_length=self.count(
                    "traces.code-max-length", self.get("traces.code-max-length")
                ),
                tasks=self.task_settings(),
                max_error_stories=self.count(
                    "traces.max-error-stories", self.get("traces.max-error-stories")
                ),
                caller_link=self.boolean("traces.caller-link", self.get("traces.caller-link")),
                follow_caller_sampling=self.layered(
                    "traces.follow-caller-sampling",
                    self.boolean,
                    True,
                    parse_env=self.env_sampler,
                ),
            ),
            metrics=self.metrics(),
            logs=self.log_settings(),
            capture=self.capture(),
            profile=ProfileSettings(
                enabled=self.boolean("profile", self.get("profile")),
                prefixes=self.integer(
                    "profile-prefixes", self.get("profile-prefixes"), minimum=1, maximum=100
                ),
                max_length=self.integer(
                    "profile-max-length", self.get("profile-max-length"), minimum=1024
                ),
            ),
            record_limits=RecordLimits(
                attribute_length=self.layered(
                    "max-attribute-length",
                    lambda k, v: self.integer(k, v, minimum=1),
                    _DEFAULT_MAX_ATTRIBUTE_LENGTH,
                ),
                attribute_count=self.layered(
                    "max-attribute-count", self.count, _DEFAULT_COUNT_LIMIT
                ),
                events=self.layered("max-events", self.count, _DEFAULT_COUNT_LIMIT),
                links=self.layered("max-links", self.count, _DEFAULT_COUNT_LIMIT),
            ),
        )

    def trace_url_template(self) -> str | None:
        template = self.optional_str("trace-url")
        if template is None:
            return None
        allowed = "a URL template with {trace_id} (and optionally {span_id})"
        if "{trace_id}" not in template:
            raise self.fail("trace-url", template, allowed)
        try:
            format_trace_url(template, 1, 1)
        except (KeyError, IndexError, ValueError):
            raise self.fail("trace-url", template, allowed) from None
        return template

    def capture(self) -> CaptureSettings:
        return CaptureSettings(
            code=self.choice(_CODE_CAPTURES)("capture.code", self.get("capture.code")),
            exceptions=self.choice(_EXCEPTION_CAPTURES)(
                "capture.exceptions", self.get("capture.exceptions")
            ),
        )

    def task_settings(self) -> TaskSettings:
        ratio_value = self.get("traces.tasks.ratio")
        try:
            if isinstance(ratio_value, bool):
                raise TypeError
            ratio = float(ratio_value)
        except (TypeError, ValueError):
            raise self.fail("traces.tasks.ratio", ratio_value, "a number from 0 to 1") from None
        if not 0 <= ratio <= 1:
            raise self.fail("traces.tasks.ratio", ratio_value, "a number from 0 to 1")
        rules_value = self.get("traces.tasks.rules") or []
        if not isinstance(rules_value, list):
            raise self.fail("traces.tasks.rules", rules_value, "a list of {match, mode} mappings")
        task_mode = self.choice(_TASK_MODES)
        rules = []
        for i, rule in enumerate(rules_value):
            key = f"traces.tasks.rules[{i}]"
            if (
                not isinstance(rule, Mapping)
                or set(rule) != {"match", "mode"}
                or not isinstance(rule["match"], str)
            ):
                raise self.fail(key, rule, "a mapping {match: <glob>, mode: none|sampled|all}")
            rules.append(TaskRule(rule["match"], task_mode(key + ".mode", rule["mode"])))
        return TaskSettings(
            mode=task_mode("traces.tasks.mode", self.get("traces.tasks.mode")),
            slowest=self.count("traces.tasks.slowest", self.get("traces.tasks.slowest")),
            ratio=ratio,
            max_per_trace=self.count(
                "traces.tasks.max-per-trace", self.get("traces.tasks.max-per-trace")
            ),
            min_duration=self.duration(
                "traces.tasks.min-duration", self.get("traces.tasks.min-duration")
            ),
            rules=tuple(rules),
        )

    def log_settings(self) -> LogSettings:
        return LogSettings(
            target=self.target("logs"),
            topics=self.globs("logs.topics"),
            exclude_topics=self.globs("logs.exclude-topics"),
            erred_tasks=self.boolean("logs.erred-tasks", self.get("logs.erred-tasks")),
            python=self.python_log_settings(),
        )

    def python_log_settings(self) -> PythonLogSettings:
        level_key = "logs.python.level"
        value = self.get(level_key)
        allowed = ", ".join(PYTHON_LOG_LEVELS) + " or none"
        if value is None or value is False:
            level = None
        elif isinstance(value, str) and value.strip().upper() in PYTHON_LOG_LEVELS:
            level = PYTHON_LOG_LEVELS[value.strip().upper()]
        elif isinstance(value, str) and value.strip().lower() == "none":
            level = None
        else:
            raise self.fail(level_key, value, allowed)
        loggers_key = "logs.python.loggers"
        loggers = self.get(loggers_key)
        if not isinstance(loggers, list) or not all(
            isinstance(name, str) and name.strip() for name in loggers
        ):
            raise self.fail(loggers_key, loggers, "a list of logger names such as [distributed]")
        return PythonLogSettings(
            loggers=tuple(name.strip() for name in loggers),
            level=level,
            max_per_second=self.count(
                "logs.python.max-per-second", self.get("logs.python.max-per-second")
            ),
        )

    def metrics(self) -> MetricsSettings:
        found = self.env_var("exporter", "metrics")
        pull_by_env = (
            self.get("metrics.exporter") is None
            and found is not None
            and "prometheus" in self.env_list(found[1])
        )
        target = self.target("metrics", env_exporter_aliases=("prometheus",))
        port = self.get("metrics.prometheus-port")
        prometheus_port: int | None = None
        if port is not None:
            prometheus_port = self.port("metrics.prometheus-port", port)
        elif pull_by_env:
            prometheus_port = self.layered(
                "metrics.prometheus-port", self.port, _DEFAULT_PROMETHEUS_PORT
            )
        price_value = self.get("metrics.cpu-hour-price")
        price: float | None = None
        if price_value is not None:
            if isinstance(price_value, bool) or not isinstance(price_value, int | float | str):
                raise self.fail("metrics.cpu-hour-price", price_value, "a number >= 0 or null")
            try:
                price = float(price_value)
            except ValueError:
                raise self.fail(
                    "metrics.cpu-hour-price", price_value, "a number >= 0 or null"
                ) from None
            if not price >= 0:
                raise self.fail("metrics.cpu-hour-price", price_value, "a number >= 0 or null")
        currency = self.optional_str("metrics.currency") or "USD"
        if not currency.isalnum() or len(currency) > 16:
            raise self.fail("metrics.currency", currency, "a short alphanumeric code such as USD")
        return MetricsSettings(
            target=target,
            interval=self.layered(
                "metrics.interval",
                self.positive_duration,
                _DEFAULT_METRIC_INTERVAL,
                parse_env=self.millis_as_seconds,
            ),
            temporality=self.layered(
                "metrics.temporality",
                self.choice(_TEMPORALITIES),
                "cumulative",
                parse_env=self.env_choice(_TEMPORALITIES),
            ),
            prometheus_port=prometheus_port,
            prometheus_host=self.layered("metrics.prometheus-host", self.text, "0.0.0.0"),
            max_span_names=self.integer(
                "metrics.max-span-names", self.get("metrics.max-span-names"), minimum=1
            ),
            max_prefixes=self.integer(
                "metrics.max-prefixes", self.get("metrics.max-prefixes"), minimum=1
            ),
            max_series=self.integer(
                "metrics.max-series", self.get("metrics.max-series"), minimum=1
            ),
            settle=self.duration("metrics.settle", self.get("metrics.settle")),
            cpu_hour_price=price,
            currency=currency,
            attribute_labels=self.attribute_labels(),
            max_attribute_values=self.integer(
                "metrics.max-attribute-values",
                self.get("metrics.max-attribute-values"),
                minimum=1,
            ),
        )

    def attribute_labels(self) -> tuple[str, ...]:
        key = "metrics.attribute-labels"
        value = self.get(key) or []
        allowed = (
            f"a list of at most {MAX_ATTRIBUTE_LABELS} workflow attribute names such as "
            "[team, pipeline] (not dask.* or otel_spans.*)"
        )
        if not isinstance(value, list) or len(value) > MAX_ATTRIBUTE_LABELS:
            raise self.fail(key, value, allowed)
        try:
            names = workflow_attributes({name: "" for name in value})
        except (ValueError, TypeError):
            raise self.fail(key, value, allowed) from None
        if len(names) < len(value):  # a name given twice
            raise self.fail(key, value, allowed + ", each once")
        return tuple(name for name, _ in names)

    def target(self, signal: str, env_exporter_aliases: tuple[str, ...] = ()) -> ExportTarget:
        """Resolve exporter kind, endpoint and transport options of one signal.

        Every option is resolved (and so validated) even when the signal ends up in
        files or nowhere: a typo must fail now, not on the day a collector is added.
        """

        def option(key: str, parse: Parse[T], default: T, **kwargs: Any) -> T:
            return self.layered(key, parse, default, signal=signal, **kwargs)

        protocol: Protocol = option(
            "protocol", self.choice(_PROTOCOLS), "grpc", parse_env=self.env_protocol
        )
        endpoint = self.endpoint(signal, protocol)
        kind, console = self.exporter_kind(
            signal, has_endpoint=endpoint is not None, aliases=env_exporter_aliases
        )
        if endpoint is None:
            # exporter "otlp" asked for explicitly, but no endpoint anywhere: the
            # OTel default for the protocol.
            endpoint = (
                "http://localhost:4317"
                if protocol == "grpc"
                else f"http://localhost:4318/v1/{signal}"
            )
        compression = option(
            "compression",
            self.choice(_COMPRESSIONS),
            "none",
            parse_env=self.env_choice(_COMPRESSIONS),
        )
        return ExportTarget(
            kind=kind,
            endpoint=endpoint if kind == "otlp" else None,
            protocol=protocol,
            headers=option("headers", self.string_map, {}, parse_env=self.env_map),
            timeout=option(
                "timeout",
                self.positive_duration,
                _DEFAULT_TIMEOUT,
                parse_env=self.millis_as_seconds,
            ),
            compression="gzip" if compression == "gzip" else None,
            certificate=option("certificate", self.readable_file, None),
            client_certificate=option("client-certificate", self.readable_file, None),
            client_key=option("client-key", self.readable_file, None),
            insecure=option("insecure", self.boolean, None, parse_env=self.env_boolean),
            directory=Path(self.optional_str("directory") or "otel-spans-data"),
            directory_max_bytes=self.byte_size("directory-max-bytes"),
            directory_max_file_bytes=self.byte_size(
                "directory-max-file-bytes", maximum=self.byte_size("directory-max-bytes")
            ),
            console=console,
        )

    def env_protocol(self, name: str, text: str) -> Protocol:
        """OTEL_EXPORTER_OTLP_*PROTOCOL; ``http/json`` is a valid OTLP protocol that
        otel-spans does not speak: said as such (then ignored like any bad value)."""
        if text.strip().lower() == "http/json":
            raise ConfigError(f"{name}: http/json is not supported (grpc or http/protobuf)")
        protocol: Protocol = self.env_choice(_PROTOCOLS)(name, text)
        return protocol

    @staticmethod
    def env_list(text: str) -> list[str]:
        """An ``OTEL_*_EXPORTER`` value: a comma-separated, case-insensitive list."""
        return [item.strip().lower() for item in text.split(",") if item.strip()]

    def exporter_kind(
        self, signal: str, *, has_endpoint: bool, aliases: tuple[str, ...]
    ) -> tuple[ExporterKind, bool]:
        """(where the signal goes, whether it is also printed to the console).

        ``aliases`` are names the variable may hold that another setting serves
        (``prometheus`` for metrics: a pull endpoint, nothing pushed).
        """
        key = f"{signal}.exporter"
        value = self.get(key)
        if value is not None:
            choice = self.choice(_EXPORTER_CHOICES, "one of " + ", ".join(_EXPORTER_CHOICES))(
                key, value
            )
            return ("none", True) if choice == "console" else (choice, False)
        default: ExporterKind = "otlp" if has_endpoint else "file"
        found = self.env_var("exporter", signal)
        if found is None:
            return default, False
        name, text = found
        allowed = (*_ENV_EXPORTERS, *aliases)
        names = self.env_list(text)
        unknown = [n for n in names if n not in allowed]
        if unknown:
            warn_ignored(
                name,
                text,
                f"unsupported exporter {', '.join(map(repr, unknown))} (otel-spans supports "
                f"{', '.join(allowed)}); the others are used",
            )
        known = [n for n in names if n in allowed]
        if not known:
            return default, False
        kind: ExporterKind = "otlp" if "otlp" in known else "none"
        return kind, "console" in known

    def endpoint(self, signal: str, protocol: Protocol) -> str | None:
        """The signal's endpoint: ``<signal>.endpoint``, ``endpoint``, then the variables.

        A signal-specific endpoint is used as is; a general one gets ``/v1/<signal>``
        appended for OTLP/HTTP, as the OTel specification says.
        """
        specific_env, general_env = OTEL_VARIABLES["endpoint"]
        assert specific_env is not None and general_env is not None
        candidates: list[tuple[str, Any, bool]] = [
            (f"{signal}.endpoint", self.get(f"{signal}.endpoint"), True),
            ("endpoint", self.get("endpoint"), False),
            *(
                (name, self.env.get(name, "").strip() or None, as_is)
                for name, as_is in (
                    (specific_env.format(SIGNAL=signal.upper()), True),
                    (general_env, False),
                )
            ),
        ]
        for key, value, as_is in candidates:
            if value is None:
                continue
            if key.startswith("OTEL_"):
                url = self.from_env((key, value), self.url, "")
                if not url:
                    continue
            else:
                url = self.url(key, value)
            if protocol == "http/protobuf" and not as_is:
                url = url.rstrip("/") + f"/v1/{signal}"
            return url
        return None


def trace_url_template(value: Any) -> str | None:
    """Validate an ``otel-spans.trace-url`` value (ConfigError naming it when bad)."""
    return _Resolver({"trace-url": value}, {}).trace_url_template()


def format_trace_url(template: str, trace_id: int, span_id: int) -> str:
    """``otel-spans.trace-url`` filled in with W3C-format (lowercase hex) ids."""
    return template.format(trace_id=f"{trace_id:032x}", span_id=f"{span_id:016x}")


def check_keys(overrides: Mapping[str, Any]) -> None:
    """Fail on unknown ``otel-spans`` keys without resolving anything else.

    Used where the environment is not the one that will run the exporter (a client
    building a plugin for a remote scheduler): names can be checked, values only there.
    """
    _Resolver(overrides, {}).check_keys()


def caller_link_default() -> bool:
    """``otel-spans.traces.caller-link`` of the calling process's dask.config.

    Read on the client each time ``otel_spans.span`` opens a root span (settings are
    otherwise resolved where the exporters run); parsed as every boolean setting is.
    """
    key = "traces.caller-link"
    value = dask.config.get(f"{NAMESPACE}.{key}", False)
    return _Resolver({}, {}).boolean(key, value)
