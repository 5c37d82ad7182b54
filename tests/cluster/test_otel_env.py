"""``OTEL_*`` variables follow the OTel SDK configuration specification.

They are process-wide and often set for other code in the same container, so a value
otel-spans does not support is warned about once and ignored, never fatal: the
scheduler starts and exports as it would without the variable. Enums are
case-insensitive, booleans are true only for ``true``, and ``*_EXPORTER`` are lists.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from distributed import span
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.util._once import Once

from otel_spans import config
from otel_spans.config import Settings
from otel_spans.sampler import SAMPLERS, TraceSampler
from otel_spans.settings import NO_LIMIT_SECONDS, bounded
from otel_spans.worker import tracing
from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.cluster import FAST, await_until, cluster_test, traced_cluster


@pytest.fixture(autouse=True)
def _clean(clean_otel_env: None) -> None:
    """Every test here starts without the machine's OTEL_* variables."""


DEFAULT_SAMPLER = "parentbased_always_on"


def resolve(env: dict[str, str], **overrides: Any) -> Settings:
    return Settings.from_config(overrides, environ=env)


def warnings_about(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and name in r.getMessage()
    ]


#: variable, bad value, how to read the setting, the value it has without the variable
BAD_VALUES: list[tuple[str, str, Any, Any]] = [
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift", lambda s: s.traces.target.protocol, "grpc"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", lambda s: s.traces.target.protocol, "grpc"),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://c", lambda s: s.traces.target.kind, "file"),
    ("OTEL_TRACES_EXPORTER", "zipkin", lambda s: s.traces.target.kind, "file"),
    ("OTEL_METRICS_EXPORTER", "statsd", lambda s: s.metrics.target.kind, "file"),
    ("OTEL_METRIC_EXPORT_INTERVAL", "x", lambda s: s.metrics.interval, 15.0),
    ("OTEL_METRIC_EXPORT_INTERVAL", "-5", lambda s: s.metrics.interval, 15.0),
    ("OTEL_SDK_DISABLED", "1", lambda s: s.enabled, True),
    ("OTEL_EXPORTER_OTLP_TIMEOUT", "-5", lambda s: s.traces.target.timeout, 10.0),
    ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", lambda s: s.traces.target.compression, None),
    ("OTEL_EXPORTER_OTLP_INSECURE", "yes", lambda s: s.traces.target.insecure, False),
    ("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "many", lambda s: s.record_limits.attribute_count, 128),
    ("OTEL_TRACES_SAMPLER", "jaeger_remote", lambda s: s.traces.sampler.name, DEFAULT_SAMPLER),
    ("OTEL_TRACES_SAMPLER", "xray", lambda s: s.traces.sampler.name, DEFAULT_SAMPLER),
    ("OTEL_TRACES_SAMPLER_ARG", "1.5", lambda s: s.traces.sampler.ratio, 1.0),
    ("OTEL_TRACES_SAMPLER_ARG", "half", lambda s: s.traces.sampler.ratio, 1.0),
    ("OTEL_METRIC_EXPORT_TIMEOUT", "-1", lambda s: s.metrics.export_timeout, 30.0),
    ("OTEL_METRIC_EXPORT_TIMEOUT", "soon", lambda s: s.metrics.export_timeout, 30.0),
    ("OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "x", lambda s: s.record_limits.event_attribute_count, 128),
    ("OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", "-1", lambda s: s.record_limits.link_attribute_count, 128),
    (
        "OTEL_LOGRECORD_ATTRIBUTE_COUNT_LIMIT",
        "1.5",
        lambda s: s.record_limits.log_attribute_count,
        128,
    ),
    (
        "OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT",
        "0",
        lambda s: s.record_limits.log_attribute_length,
        4096,
    ),
    (
        "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
        "weekly",
        lambda s: s.metrics.temporality,
        "cumulative",
    ),
]


@pytest.mark.parametrize(("name", "value", "read", "default"), BAD_VALUES)
def test_a_bad_variable_is_warned_about_once_and_ignored(
    name: str, value: str, read: Any, default: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_spans"):
        settings = resolve({name: value})
        resolve({name: value})  # a second scheduler, worker or client in the process
    assert read(settings) == default
    (warning,) = warnings_about(caplog, name)
    assert value in warning or name == "OTEL_EXPORTER_OTLP_HEADERS"


def test_the_defaults_are_what_the_bad_value_test_expects() -> None:
    """otel-spans' own defaults (15 s metric interval, files without an endpoint)."""
    settings = resolve({})
    assert settings.metrics.interval == 15.0
    assert (settings.traces.target.kind, settings.metrics.target.kind) == ("file", "file")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "HTTP/PROTOBUF"}, "http/protobuf"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": " Grpc "}, "grpc"),
    ],
)
def test_enums_are_case_insensitive(env: dict[str, str], expected: str) -> None:
    assert resolve(env).traces.target.protocol == expected


def test_compression_and_temporality_are_case_insensitive() -> None:
    settings = resolve(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "GZIP",
            "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "LowMemory",
        }
    )
    assert settings.traces.target.compression == "gzip"
    assert settings.metrics.temporality == "lowmemory"


@pytest.mark.parametrize(
    ("value", "enabled", "warned"),
    [
        ("true", False, False),
        ("TRUE", False, False),
        ("True", False, False),
        ("false", True, False),
        ("FALSE", True, False),
        ("1", True, True),
        ("yes", True, True),
    ],
)
def test_only_true_disables_the_sdk(
    value: str, enabled: bool, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_spans"):
        assert resolve({"OTEL_SDK_DISABLED": value}).enabled is enabled
    assert bool(warnings_about(caplog, "OTEL_SDK_DISABLED")) is warned


@pytest.mark.parametrize(
    ("value", "kind", "console", "warned"),
    [
        ("otlp", "otlp", False, False),
        ("console", "none", True, False),
        ("otlp,console", "otlp", True, False),
        (" OTLP , Console ", "otlp", True, False),
        ("none", "none", False, False),
        ("zipkin,otlp", "otlp", False, True),
        ("zipkin", "otlp", False, True),  # nothing usable: as if unset (endpoint set: otlp)
    ],
)
def test_exporter_variables_are_lists(
    value: str, kind: str, console: bool, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": value}
    with caplog.at_level(logging.WARNING, logger="otel_spans"):
        target = resolve(env).traces.target
    assert (target.kind, target.console) == (kind, console)
    assert target.enabled is (kind != "none" or console)
    assert bool(warnings_about(caplog, "OTEL_TRACES_EXPORTER")) is warned


def test_prometheus_in_a_metrics_exporter_list_serves_a_pull_endpoint() -> None:
    settings = resolve({"OTEL_METRICS_EXPORTER": "prometheus,console"})
    assert settings.metrics.prometheus_port == 9464  # the specification's default port
    assert (settings.metrics.target.kind, settings.metrics.target.console) == ("none", True)


def test_our_own_keys_stay_strict() -> None:
    with pytest.raises(config.ConfigError, match=r"otel-spans\.protocol: invalid value 'thrift'"):
        resolve({}, protocol="thrift")


def test_the_console_exporter_is_also_a_dask_config_choice() -> None:
    target = resolve({}, traces={"exporter": "console"}).traces.target
    assert (target.kind, target.console, target.enabled) == ("none", True, True)


#: The variables that each stopped the scheduler from starting before (ConfigError).
STARTS_WITH = [
    {"OTEL_SDK_DISABLED": "1"},
    {"OTEL_TRACES_EXPORTER": "console"},
    {"OTEL_TRACES_EXPORTER": "otlp,console"},
    {"OTEL_METRICS_EXPORTER": "otlp,console"},
    {"OTEL_EXPORTER_OTLP_COMPRESSION": "GZIP"},
    {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
]


@pytest.mark.parametrize("env", STARTS_WITH, ids=lambda env: "=".join(next(iter(env.items()))))
@cluster_test(timeout=90)
async def test_the_scheduler_starts_and_exports_with(
    env: dict[str, str],
    otlp_receiver: OtlpReceiver,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cfg = {**FAST, "otel-spans.endpoint": otlp_receiver.grpc_endpoint}
    async with traced_cluster(cfg) as (client, scheduler, _):
        assert "otel-spans" in scheduler.plugins
        with span("works"):
            assert await client.submit(lambda x: x + 1, 1) == 2
        if env.get("OTEL_TRACES_EXPORTER") == "console":
            printed: list[Any] = []

            def printed_span() -> bool:
                printed.extend(
                    json.loads(line)
                    for line in capfd.readouterr().out.splitlines()
                    if line.startswith('{"resourceSpans"')
                )
                return any(
                    s["name"] == "works"
                    for request in printed
                    for rs in request["resourceSpans"]
                    for ss in rs["scopeSpans"]
                    for s in ss["spans"]
                )

            await await_until(printed_span, 30, "the console printed no span 'works'")
            assert not otlp_receiver.spans()  # console alone: nothing went to the collector
        else:
            await await_until(
                lambda: [s for s in otlp_receiver.spans() if s.name == "works"],
                30,
                "no span 'works' reached the collector",
            )
            if env.get("OTEL_TRACES_EXPORTER") == "otlp,console":
                out = capfd.readouterr().out
                assert '"name": "works"' in out or '"name":"works"' in out


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_builtin_sampler_is_read_case_insensitively(sampler: str) -> None:
    env = {"OTEL_TRACES_SAMPLER": sampler.upper(), "OTEL_TRACES_SAMPLER_ARG": "0.25"}
    assert resolve(env).traces.sampler == TraceSampler(sampler, 0.25)  # type: ignore[arg-type]
    # the otel-spans key, when set, wins
    assert resolve(env, traces={"sampler": "always_off"}).traces.sampler.name == "always_off"


def test_the_sampler_defaults_are_the_specifications() -> None:
    assert resolve({}).traces.sampler == TraceSampler("parentbased_always_on", 1.0)
    assert resolve({"OTEL_TRACES_SAMPLER": "traceidratio"}).traces.sampler.ratio == 1.0


@pytest.mark.parametrize(("follows", "sampler"), [(True, DEFAULT_SAMPLER), (False, "always_on")])
def test_the_deprecated_follow_caller_key_still_decides(follows: bool, sampler: str) -> None:
    """0.2's ``traces.follow-caller-sampling`` is ``traces.sampler`` when that is not
    set; a key beats the variable, and ``traces.sampler`` beats it."""
    old = {"traces": {"follow-caller-sampling": follows}}
    assert resolve({}, **old).traces.sampler.name == sampler
    assert resolve({"OTEL_TRACES_SAMPLER": "always_off"}, **old).traces.sampler.name == sampler
    both = {"traces": {"follow-caller-sampling": follows, "sampler": "traceidratio"}}
    assert resolve({}, **both).traces.sampler.name == "traceidratio"


@pytest.mark.parametrize(
    ("name", "read"),
    [
        ("OTEL_EXPORTER_OTLP_TIMEOUT", lambda s: s.traces.target.timeout),
        ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", lambda s: s.metrics.target.timeout),
        ("OTEL_METRIC_EXPORT_TIMEOUT", lambda s: s.metrics.export_timeout),
    ],
)
def test_a_timeout_of_zero_is_no_limit(name: str, read: Any) -> None:
    """The specification: a timeout variable of 0 means no limit (not refused)."""
    assert read(resolve({name: "0"})) == math.inf
    assert read(resolve({name: "2500"})) == 2.5
    # libraries get a number: a year stands for "no limit"
    assert bounded(math.inf) == NO_LIMIT_SECONDS and bounded(2.5) == 2.5


def test_the_otel_spans_timeout_keys_take_zero_as_no_limit_too() -> None:
    settings = resolve({}, timeout=0, metrics={"export-timeout": "0s"})
    assert settings.traces.target.timeout == settings.metrics.export_timeout == math.inf


def test_the_metric_export_timeout_is_read_not_overridden() -> None:
    """``OTEL_METRIC_EXPORT_TIMEOUT`` bounds one collection and export (default 30 s, as
    specified); the OTLP exporter's own timeout stays the per-request bound."""
    settings = resolve({"OTEL_METRIC_EXPORT_TIMEOUT": "45000"})
    assert (settings.metrics.export_timeout, settings.metrics.target.timeout) == (45.0, 10.0)
    assert resolve({}).metrics.export_timeout == 30.0


@pytest.mark.parametrize(
    ("insecure", "endpoint"),
    [(None, "https://collector:4317"), ("false", "https://collector:4317"),
     ("true", "http://collector:4317")],
)  # fmt: skip
def test_a_grpc_endpoint_without_a_scheme_is_accepted(
    insecure: str | None, endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The specification accepts ``host:port`` for OTLP/gRPC, where ``insecure`` (default
    false) chooses TLS or plain text; the endpoint then carries the scheme it implies."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"}
    if insecure is not None:
        env["OTEL_EXPORTER_OTLP_INSECURE"] = insecure
    with caplog.at_level(logging.WARNING, logger="otel_spans"):
        target = resolve(env).traces.target
    assert (target.kind, target.protocol, target.endpoint) == ("otlp", "grpc", endpoint)
    assert not warnings_about(caplog, "OTEL_EXPORTER_OTLP_ENDPOINT")


def test_an_http_endpoint_without_a_scheme_is_warned_about_and_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4318",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
    }
    with caplog.at_level(logging.WARNING, logger="otel_spans"):
        target = resolve(env).traces.target
    assert target.endpoint == "http://c:4318/v1/traces"  # the next layer decides
    (warning,) = warnings_about(caplog, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    assert "grpc only" in warning
    with pytest.raises(config.ConfigError, match=r"otel-spans\.traces\.endpoint"):
        resolve({}, protocol="http/protobuf", traces={"endpoint": "collector:4318"})


def test_the_prometheus_endpoint_binds_localhost_unless_told() -> None:
    """The specification's default host is localhost (it was 0.0.0.0)."""
    env = {"OTEL_METRICS_EXPORTER": "prometheus"}
    assert resolve(env).metrics.prometheus_host == "localhost"
    env["OTEL_EXPORTER_PROMETHEUS_HOST"] = "0.0.0.0"
    assert resolve(env).metrics.prometheus_host == "0.0.0.0"


@pytest.mark.parametrize("value", ["abc", "70000", "-1"])
def test_a_bad_prometheus_port_variable_is_warned_about_and_ignored(
    value: str, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_PORT": value}
    with caplog.at_level(logging.WARNING, logger="otel_spans"):
        assert resolve(env).metrics.prometheus_port == 9464  # the specification's default
        resolve(env)
    (warning,) = warnings_about(caplog, "OTEL_EXPORTER_PROMETHEUS_PORT")
    assert value in warning
    env["OTEL_EXPORTER_PROMETHEUS_PORT"] = "9999"
    assert resolve(env).metrics.prometheus_port == 9999


CERTIFICATE_VARIABLES = [
    ("OTEL_EXPORTER_OTLP_CERTIFICATE", "certificate"),
    ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "client_certificate"),
    ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "client_key"),
    ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "certificate"),
    ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "client_certificate"),
    ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "client_key"),
]


@pytest.mark.parametrize(("name", "field"), CERTIFICATE_VARIABLES)
def test_a_certificate_variable_that_is_no_readable_file_is_warned_about_and_ignored(
    name: str, field: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4317", name: str(tmp_path / "missing.pem")}
    with caplog.at_level(logging.WARNING, logger="otel_spans"):
        target = resolve(env).traces.target
        resolve(env)
    assert getattr(target, field) is None
    assert target.kind == "otlp"  # the scheduler starts and exports all the same
    (warning,) = warnings_about(caplog, name)
    assert "missing.pem" in warning
    # a directory is not a readable file either; an existing file is used
    env[name] = str(tmp_path)
    assert getattr(resolve(env).traces.target, field) is None
    pem = tmp_path / "ok.pem"
    pem.write_text("x")
    env[name] = str(pem)
    assert getattr(resolve(env).traces.target, field) == str(pem)


def test_a_bad_signal_variable_leaves_the_general_one_to_decide(tmp_path: Path) -> None:
    """Ignored means "as if not set": the next layer of the lookup decides."""
    pem = tmp_path / "ca.pem"
    pem.write_text("x")
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": str(tmp_path / "missing.pem"),
        "OTEL_EXPORTER_OTLP_CERTIFICATE": str(pem),
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "soon",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
    }
    target = resolve(env).traces.target
    assert (target.certificate, target.timeout) == (str(pem), 2.5)


@pytest.mark.parametrize(
    ("value", "kind", "console"),
    [("none", "none", False), ("console", "none", True), ("otlp", "otlp", False)],
)
def test_the_logs_exporter_variable_decides_where_log_records_go(
    value: str, kind: str, console: bool
) -> None:
    """``OTEL_LOGS_EXPORTER`` is a list of otlp, console and none, for logs alone."""
    settings = resolve({"OTEL_LOGS_EXPORTER": value})
    logs = settings.logs.target
    assert (logs.kind, logs.console, logs.enabled) == (kind, console, kind != "none" or console)
    if kind == "otlp":  # no endpoint anywhere: the OTel default for grpc
        assert logs.endpoint == "http://localhost:4317"
    # the other signals keep the embedded default (files)
    assert (settings.traces.target.kind, settings.metrics.target.kind) == ("file", "file")
    # the otel-spans key, when set, wins
    assert resolve({"OTEL_LOGS_EXPORTER": value}, logs={"exporter": "file"}).logs.target.kind == (
        "file"
    )


def test_prometheus_is_a_metrics_exporter_only(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_spans"):
        logs = resolve({"OTEL_LOGS_EXPORTER": "prometheus"}).logs.target
    assert logs.kind == "file"  # nothing usable: as if unset
    (warning,) = warnings_about(caplog, "OTEL_LOGS_EXPORTER")
    assert "'prometheus'" in warning


@pytest.fixture
def fresh_tracer_provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No global TracerProvider yet (OTel allows setting it once per process), and no
    process-wide tracing state of otel-spans' worker side."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(tracing, "_process", tracing._Process())
    yield


@pytest.mark.parametrize(
    ("provider", "sdk"), [("sdk_tracer_provider", True), ("default_tracer_provider", False)]
)
def test_a_tracer_provider_variable_keeps_the_users_provider(
    provider: str, sdk: bool, fresh_tracer_provider: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OTEL_PYTHON_TRACER_PROVIDER`` (read by the OTel API): task code keeps that
    provider; otel-spans only counts task children on it (an SDK provider) and never
    exports its spans itself."""
    monkeypatch.setenv("OTEL_PYTHON_TRACER_PROVIDER", provider)
    lease = tracing.acquire(resolve({}), Resource.create)
    try:
        users = trace.get_tracer_provider()
        assert lease.provider == "user"
        assert isinstance(users, TracerProvider) is sdk
        assert tracing._process.provider is None  # otel-spans set no provider
        assert tracing._process.processor.export is None  # nor exports the user's spans
        assert (tracing._process.adopted is users) is sdk  # children counted on an SDK one
        assert lease.stats() == {"provider": "user"}
    finally:
        lease.release()


def test_the_workers_provider_takes_the_resolved_sampler_limits_and_batching(
    fresh_tracer_provider: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The SDK would read OTEL_TRACES_SAMPLER, the limits and OTEL_BSP_* itself for a
    provider given none: the worker's gets them all, resolved as the scheduler's are."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    env = {
        "OTEL_TRACES_SAMPLER": "traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0",
        "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "3",
        "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT": "2",
        "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT": "1",
        "OTEL_BSP_SCHEDULE_DELAY": "60000",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # the sampler as a key would set it; the files of the embedded default in tmp_path
    settings = resolve(env, traces={"sampler": "always_on"}, directory=str(tmp_path))
    lease = tracing.acquire(settings, Resource.create)
    try:
        provider = trace.get_tracer_provider()
        assert isinstance(provider, TracerProvider) and lease.provider == "otel-spans"
        assert provider.sampler.get_description() == "AlwaysOnSampler"
        spans = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        tracer = provider.get_tracer("t")
        many = {f"a{i}": i for i in range(5)}
        link = trace.Link(trace.SpanContext(1, 2, True), many)
        with tracer.start_as_current_span("s", attributes=many, links=[link]) as span:
            span.add_event("e", many)
        (done,) = spans.get_finished_spans()
        assert done.dropped_attributes == 2
        assert len(done.events[0].attributes) == 2 and len(done.links[0].attributes) == 1
        export = tracing._process.processor.export
        assert export is not None and export.processor is not None  # started by the span
        batch: Any = export.processor._batch_processor  # private: the delay is not exposed
        # OTEL_BSP_SCHEDULE_DELAY as otel-spans resolved it (traces.batch-wait), in seconds
        assert batch._schedule_delay == settings.traces.batch_wait == 60.0
    finally:
        lease.release()
