"""Assembly: the raw ``otel-spans`` mapping and the environment -> typed :class:`Settings`.

Every value goes through one lookup, :meth:`Resolver.find`, driven by the table
(:mod:`.table`): the dask.config key when it is not null, then the signal-specific
``OTEL_*`` variable, then the general one, then the table's default. A bad key raises
:class:`ConfigError`; a bad variable is warned about once and the lookup goes on as if
it were not set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from otel_spans.config.parsers import NAMESPACE, ByteSize, fail, has_scheme, warn_ignored
from otel_spans.config.table import (
    PROMETHEUS_DEFAULT_PORT,
    ROWS,
    SETTINGS,
    Setting,
    allowed_keys,
)
from otel_spans.redact import has_userinfo, redact_url, strip_userinfo
from otel_spans.sampler import TraceSampler
from otel_spans.settings import (
    CaptureSettings,
    ConfigError,
    DiagnosisSettings,
    ExporterKind,
    ExportTarget,
    LogSettings,
    MetricsSettings,
    ProfileSettings,
    PythonLogSettings,
    RecordLimits,
    Settings,
    TaskSettings,
    TraceSettings,
)

S = TypeVar("S", bound=Settings)

#: Stands for "the table's default" in :meth:`Resolver.value`.
_TABLE_DEFAULT: Any = object()
#: Why a parsed value cannot be used where it is looked up (None: it can).
Refuse = Callable[[Any], "str | None"]


def canonical(d: dict[str, Any]) -> dict[str, Any]:
    """dask.config accepts ``foo_bar`` for ``foo-bar``; so do we."""
    return {k.replace("_", "-"): canonical(v) if isinstance(v, dict) else v for k, v in d.items()}


class Resolver:
    """Turns the raw mapping into typed settings, failing on the first bad value."""

    def __init__(self, raw: Mapping[str, Any], environ: Mapping[str, str]):
        self.raw = canonical(dict(raw))
        self.env = environ

    # -- the one lookup ----------------------------------------------------------------
    def get(self, key: str) -> Any:
        """The raw dask.config value of a dotted key (None when absent)."""
        node: Any = self.raw
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        return node

    def key_value(self, row: Setting) -> tuple[bool, Any]:
        """(whether the key decides, its parsed value): null "not set here" does not."""
        value = self.get(row.key)
        if value is None and row.null_is_unset:
            return False, None
        return True, row.parse(row.key, value)

    def find(
        self, key: str, signal: str | None = None, refuse: Refuse | None = None
    ) -> tuple[str, Any] | None:
        """(where the value came from, the value): the key, then each variable, in order.

        A variable the parser rejects is warned about once and skipped, as is one the
        parser reads as "unset" (None). ``refuse`` says why a parsed value cannot be
        used here (None when it can): the key's raises, a variable's is skipped with a
        warning. None when no layer gives a value.
        """
        row = SETTINGS[key]
        decides, value = self.key_value(row)
        if decides and not row.env_disables:
            why = refuse(value) if refuse is not None and value is not None else None
            if why is not None:
                raise fail(key, redact_url(str(value)), why)
            return f"{NAMESPACE}.{key}", value
        for name in row.variables(signal):
            text = self.env.get(name, "").strip()
            if not text:
                continue
            try:
                parsed = row.parse.from_env(name, text)
            except ConfigError as error:
                why = str(error).removeprefix(f"{name}: ")
                warn_ignored(name, text, f"{why}; using the default")
                continue
            if parsed is None:
                continue
            why = refuse(parsed) if refuse is not None else None
            if why is not None:
                warn_ignored(name, text, f"{why}; using the default")
                continue
            if row.env_disables:  # the variable can only say "off"
                return (name, False) if parsed else (f"{NAMESPACE}.{key}", value)
            return name, parsed
        return (f"{NAMESPACE}.{key}", value) if decides else None

    def value(self, key: str, signal: str | None = None, default: Any = _TABLE_DEFAULT) -> Any:
        """The setting's value: :meth:`find`, else the default (the table's unless given)."""
        found = self.find(key, signal)
        if found is not None:
            return found[1]
        if default is not _TABLE_DEFAULT:
            return default
        row = SETTINGS[key]
        return None if row.default is None else row.parse(key, row.default)

    # -- keys and values -------------------------------------------------------------------
    def check_keys(self) -> None:
        """Fail on the first unknown key or on a section that is not a mapping."""
        self._check_keys(self.raw, allowed_keys(), "")

    def _check_keys(self, raw: Mapping[str, Any], allowed: Mapping[str, Any], path: str) -> None:
        for key, value in raw.items():
            if key not in allowed:
                raise ConfigError(
                    f"{NAMESPACE}.{path}{key}: unknown key; "
                    f"allowed keys here: {', '.join(sorted(allowed))}"
                )
            if isinstance(allowed[key], dict):
                if not isinstance(value, Mapping):
                    raise fail(f"{path}{key}", value, "a mapping")
                self._check_keys(value, allowed[key], f"{path}{key}.")

    def validate(self) -> None:
        """Every key's value, parsed once: a typo fails now, whether or not it is used."""
        self.check_keys()
        for row in ROWS:
            self.key_value(row)

    # -- composite settings ------------------------------------------------------------
    def settings(self, cls: type[S]) -> S:
        """All of them, as ``cls`` (:class:`Settings` or a subclass)."""
        self.validate()
        v = self.value
        return cls(
            enabled=v("enabled"),
            service_name=v("service-name"),
            service_namespace=v("service-namespace"),
            cluster_name=v("cluster-name"),
            trace_url=v("trace-url"),
            resource_attributes=v("resource-attributes"),
            workflow_attributes=v("workflow-attributes"),
            queue_size=v("queue-size"),
            batch_size=v("batch-size"),
            shutdown_timeout=v("shutdown-timeout"),
            traces=TraceSettings(
                target=self.target("traces"),
                linger=v("traces.linger"),
                poll_interval=v("traces.poll-interval"),
                batch_wait=v("traces.batch-wait"),
                code_max_length=v("traces.code-max-length"),
                tasks=TaskSettings(
                    mode=v("traces.tasks.mode"),
                    slowest=v("traces.tasks.slowest"),
                    ratio=v("traces.tasks.ratio"),
                    max_per_trace=v("traces.tasks.max-per-trace"),
                    min_duration=v("traces.tasks.min-duration"),
                    rules=v("traces.tasks.rules"),
                ),
                max_error_stories=v("traces.max-error-stories"),
                caller_link=v("traces.caller-link"),
                sampler=self.sampler(),
            ),
            metrics=self.metrics(),
            logs=LogSettings(
                target=self.target("logs"),
                topics=v("logs.topics"),
                exclude_topics=v("logs.exclude-topics"),
                erred_tasks=v("logs.erred-tasks"),
                batch_wait=v("logs.batch-wait"),
                python=PythonLogSettings(
                    loggers=v("logs.python.loggers"),
                    level=v("logs.python.level"),
                    max_per_second=v("logs.python.max-per-second"),
                ),
            ),
            capture=CaptureSettings(code=v("capture.code"), exceptions=v("capture.exceptions")),
            diagnosis=DiagnosisSettings(min_duration=v("diagnosis.min-duration")),
            profile=ProfileSettings(
                enabled=v("profile"),
                prefixes=v("profile-prefixes"),
                max_length=v("profile-max-length"),
            ),
            record_limits=RecordLimits(
                attribute_length=v("max-attribute-length"),
                attribute_count=v("max-attribute-count"),
                events=v("max-events"),
                links=v("max-links"),
                event_attribute_count=v("max-event-attribute-count"),
                link_attribute_count=v("max-link-attribute-count"),
                log_attribute_length=v("max-log-attribute-length"),
                log_attribute_count=v("max-log-attribute-count"),
            ),
        )

    def sampler(self) -> TraceSampler:
        """``traces.sampler``; the deprecated ``traces.follow-caller-sampling`` key
        decides when it is set and ``traces.sampler`` is not (a key beats a variable)."""
        name = self.find("traces.sampler")
        if name is None or not name[0].startswith(NAMESPACE):
            old_set, old = self.key_value(SETTINGS["traces.follow-caller-sampling"])
            if old_set:
                name = (NAMESPACE, old)
        chosen = name[1] if name is not None else self.value("traces.sampler")
        return TraceSampler(chosen, self.value("traces.sampler-arg"))

    def metrics(self) -> MetricsSettings:
        exporters = self.find("metrics.exporter", "metrics")
        v = self.value
        # OTEL_METRICS_EXPORTER=prometheus: no push, a pull endpoint (on the default
        # port unless a variable says otherwise); the key, when set, decides alone.
        pull_by_env = (
            exporters is not None
            and exporters[0].startswith("OTEL_")
            and "prometheus" in exporters[1]
        )
        port_set, port = self.key_value(SETTINGS["metrics.prometheus-port"])
        if not port_set and pull_by_env:
            port = v("metrics.prometheus-port", default=PROMETHEUS_DEFAULT_PORT)
        return MetricsSettings(
            target=self.target("metrics"),
            interval=v("metrics.interval"),
            temporality=v("metrics.temporality"),
            prometheus_port=port,
            prometheus_host=v("metrics.prometheus-host"),
            max_span_names=v("metrics.max-span-names"),
            max_prefixes=v("metrics.max-prefixes"),
            max_workers=v("metrics.max-workers"),
            max_series=v("metrics.max-series"),
            settle=v("metrics.settle"),
            cpu_hour_price=v("metrics.cpu-hour-price"),
            currency=v("metrics.currency"),
            attribute_labels=v("metrics.attribute-labels"),
            max_attribute_values=v("metrics.max-attribute-values"),
            export_timeout=v("metrics.export-timeout"),
        )

    def target(self, signal: str) -> ExportTarget:
        """Resolve exporter kind, endpoint and transport options of one signal.

        Every option is resolved (and so validated) even when the signal ends up in
        files or nowhere: a typo must fail now, not on the day a collector is added.
        """

        def option(key: str) -> Any:
            return self.value(key, signal)

        protocol = option("protocol")
        endpoint = self.endpoint(signal, protocol)
        names: tuple[str, ...] = self.value(
            f"{signal}.exporter", signal, default=("otlp" if endpoint else "file",)
        )
        kind: ExporterKind = next((k for k in ("otlp", "file") if k in names), "none")
        if endpoint is None:
            # exporter "otlp" asked for explicitly, but no endpoint anywhere: the
            # OTel default for the protocol.
            endpoint = (
                "http://localhost:4317"
                if protocol == "grpc"
                else f"http://localhost:4318/v1/{signal}"
            )
        if protocol == "grpc" and has_userinfo(endpoint):
            warn_ignored(
                "the user:password of an OTLP endpoint",
                endpoint,
                f"gRPC sends no URL credentials ({redact_url(endpoint)}); "
                "put them in otel-spans.headers or OTEL_EXPORTER_OTLP_HEADERS",
            )
            endpoint = strip_userinfo(endpoint)
        return ExportTarget(
            kind=kind,
            endpoint=endpoint if kind == "otlp" else None,
            protocol=protocol,
            headers=option("headers"),
            timeout=option("timeout"),
            compression="gzip" if option("compression") == "gzip" else None,
            certificate=option("certificate"),
            client_certificate=option("client-certificate"),
            client_key=option("client-key"),
            insecure=option("insecure"),
            directory=Path(option("directory")),
            directory_max_bytes=option("directory-max-bytes"),
            directory_max_file_bytes=self.file_bytes(option("directory-max-bytes")),
            console="console" in names,
        )

    def file_bytes(self, total: int) -> int:
        """``directory-max-file-bytes``, which may not exceed the total it rotates under."""
        size: int = self.value("directory-max-file-bytes")
        if size > total:
            raise fail(
                "directory-max-file-bytes",
                self.get("directory-max-file-bytes"),
                f"{ByteSize().allowed} and at most directory-max-bytes ({total})",
            )
        return size

    def endpoint(self, signal: str, protocol: str) -> str | None:
        """The signal's endpoint: ``<signal>.endpoint`` (used as is), else ``endpoint``'s
        lookup, where only the signal-specific variable is used as is: a general
        endpoint gets ``/v1/<signal>`` appended for OTLP/HTTP, as the OTel
        specification says."""
        refuse = None if protocol == "grpc" else _needs_scheme
        own = self.find(f"{signal}.endpoint", refuse=refuse)
        if own is not None:
            return self._with_scheme(str(own[1]), signal)
        found = self.find("endpoint", signal, refuse=refuse)
        if found is None:
            return None
        source, url = found
        as_is = source == SETTINGS["endpoint"].variables(signal)[0]
        if protocol == "http/protobuf" and not as_is:
            url = url.rstrip("/") + f"/v1/{signal}"
        return self._with_scheme(str(url), signal)

    def _with_scheme(self, url: str, signal: str) -> str:
        """A gRPC ``host:port`` with the scheme ``insecure`` implies (TLS unless true),
        as the OTel specification says; every endpoint then carries its transport."""
        if has_scheme(url):
            return url
        return ("http://" if self.value("insecure", signal) else "https://") + url


def _needs_scheme(url: Any) -> str | None:
    """OTLP/HTTP needs a URL with a scheme; only gRPC takes ``host:port``."""
    if has_scheme(str(url)):
        return None
    return "an http:// or https:// URL (host:port without a scheme is for grpc only)"
