"""Settings resolution: precedence of dask.config over OTEL_*, and eager, clear errors."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import dask.config
import pytest

from otel_spans.config import CaptureSettings, ConfigError, RecordLimits, Settings, check_keys
from tests.support.settings import resolve

pytestmark = pytest.mark.usefixtures("clean_config")


def test_defaults_write_files_when_no_endpoint_anywhere() -> None:
    s = resolve()
    assert s.enabled
    assert s.traces.target.kind == "file"
    assert s.traces.target.directory == Path("otel-spans-data")
    assert s.service_name is None
    assert s.traces.linger == 2.0
    assert s.traces.poll_interval == 0.5
    assert s.traces.tasks.min_duration == 0.001
    assert s.max_attribute_length == 4096


def test_general_env_endpoint_grpc_default() -> None:
    s = resolve({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"})
    assert s.traces.target.kind == "otlp"
    assert s.traces.target.protocol == "grpc"
    assert s.traces.target.endpoint == "http://collector:4317"


def test_http_appends_signal_path_to_general_endpoint_only() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
    }
    assert resolve(env).traces.target.endpoint == "http://collector:4318/v1/traces"
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = "http://other:9999/custom"
    assert resolve(env).traces.target.endpoint == "http://other:9999/custom"


def test_dask_config_beats_environment() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://env:4317",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_HEADERS": "a=1",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
        "OTEL_SERVICE_NAME": "from-env",
    }
    s = resolve(env)
    assert s.traces.target.endpoint == "http://env:4317"
    assert s.traces.target.headers == {"a": "1"}
    assert s.traces.target.timeout == 2.5  # milliseconds, as the OTel spec says
    assert s.service_name == "from-env"
    s = resolve(
        env,
        endpoint="http://dask:4318",
        protocol="http/protobuf",
        headers={"b": "2"},
        timeout="3s",
        service_name="from-dask",
    )
    assert s.traces.target.endpoint == "http://dask:4318/v1/traces"
    assert s.traces.target.headers == {"b": "2"}
    assert s.traces.target.timeout == 3.0
    assert s.service_name == "from-dask"


def test_signal_specific_dask_key_beats_general_one() -> None:
    s = resolve(endpoint="http://general:4317", traces={"endpoint": "http://traces:4317"})
    assert s.traces.target.endpoint == "http://traces:4317"


def test_env_headers_are_parsed_as_the_sdk_does() -> None:
    """URL-decoded values; names lower-cased (gRPC metadata keys must be lower case)."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
        "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20abc, x-tenant = t1",
    }
    assert resolve(env).traces.target.headers == {"authorization": "Bearer abc", "x-tenant": "t1"}


def test_sdk_disabled_and_traces_exporter_none() -> None:
    assert not resolve({"OTEL_SDK_DISABLED": "true"}).enabled
    assert resolve({"OTEL_SDK_DISABLED": "false"}).enabled
    assert resolve({"OTEL_TRACES_EXPORTER": "none"}).traces.target.kind == "none"
    assert resolve(traces={"exporter": "none"}).traces.target.kind == "none"


def test_insecure_and_compression_from_env() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4317",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
    }
    target = resolve(env).traces.target
    assert target.insecure is True
    assert target.compression == "gzip"


def test_certificate_must_exist(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4317"}
    assert resolve(env, certificate=str(ca)).traces.target.certificate == str(ca)
    with pytest.raises(ConfigError, match=r"otel-spans\.certificate: invalid value '/nope'"):
        resolve(env, certificate="/nope")


def test_a_bad_header_value_is_not_echoed_in_the_error() -> None:
    with pytest.raises(ConfigError, match=r"otel-spans\.headers: invalid value") as error:
        resolve(headers={"authorization": ["Bearer s3cr3t"]})
    assert "authorization" in str(error.value)
    assert "s3cr3t" not in str(error.value)


def test_describe_never_shows_header_values() -> None:
    s = resolve(endpoint="http://c:4317", headers={"authorization": "Bearer s3cr3t"})
    assert "s3cr3t" not in s.traces.target.describe()
    assert "s3cr3t" not in repr(s.traces.target.describe())


@pytest.mark.parametrize(
    ("overrides", "env", "message"),
    [
        (
            {"protocol": "udp"},
            {},
            r"otel-spans\.protocol: invalid value 'udp'; expected grpc or http/protobuf",
        ),
        (
            {"endpoint": "collector:4317", "protocol": "http/protobuf"},
            {},
            r"otel-spans\.endpoint: invalid value 'collector:4317'; expected an http://",
        ),
        ({"endpoint": "ftp://collector:4317"}, {}, r"otel-spans\.endpoint: invalid value"),
        ({"endpoint": "collector:4317/v1"}, {}, r"otel-spans\.endpoint: invalid value"),
        ({"endpoint": "http://:4317"}, {}, r"otel-spans\.endpoint: invalid value"),
        ({"endpoint": "http://c:99999"}, {}, r"otel-spans\.endpoint: invalid value"),
        ({"endpoint": 4317}, {}, r"otel-spans\.endpoint: invalid value 4317"),
        (
            {"queue_size": -1},
            {},
            r"otel-spans\.queue-size: invalid value -1; expected an integer >= 1",
        ),
        ({"queue_size": "many"}, {}, r"otel-spans\.queue-size: invalid value 'many'"),
        ({"batch_size": 0}, {}, r"otel-spans\.batch-size: invalid value 0"),
        ({"batch_size": True}, {}, r"otel-spans\.batch-size: invalid value True"),
        ({"shutdown_timeout": "-1s"}, {}, r"otel-spans\.shutdown-timeout: invalid value '-1s'"),
        (
            {"shutdown_timeout": "soon"},
            {},
            r"otel-spans\.shutdown-timeout: invalid value 'soon'; expected a duration",
        ),
        (
            {"traces": {"poll-interval": 0}},
            {},
            r"otel-spans\.traces\.poll-interval: invalid value 0; expected a positive duration",
        ),
        ({"traces": {"linger": [1]}}, {}, r"otel-spans\.traces\.linger: invalid value \[1\]"),
        (
            {"traces": {"tasks": {"min-duration": -0.5}}},
            {},
            r"otel-spans\.traces\.tasks\.min-duration: invalid value -0.5; expected a duration",
        ),
        (
            {"traces": {"exporter": "zipkin"}},
            {},
            r"traces\.exporter: invalid value 'zipkin'; expected one of otlp, file, none",
        ),
        ({"metrics": {"interval": "0s"}}, {}, r"otel-spans\.metrics\.interval: invalid value '0s'"),
        (
            {"metrics": {"temporality": "weekly"}},
            {},
            r"otel-spans\.metrics\.temporality: invalid value 'weekly'; expected cumulative, delta",
        ),
        (
            {"metrics": {"prometheus-port": 70000}},
            {},
            r"metrics\.prometheus-port: invalid value 70000",
        ),
        ({"metrics": {"prometheus-port": -1}}, {}, r"metrics\.prometheus-port: invalid value -1"),
        ({"metrics": {"max-span-names": 0}}, {}, r"metrics\.max-span-names: invalid value 0"),
        (
            {"metrics": {"cpu-hour-price": "cheap"}},
            {},
            r"metrics\.cpu-hour-price: invalid value 'cheap'",
        ),
        ({"metrics": {"cpu-hour-price": -1}}, {}, r"metrics\.cpu-hour-price: invalid value -1"),
        ({"metrics": {"currency": "US$"}}, {}, r"metrics\.currency: invalid value 'US\$'"),
        (
            {"enabled": "yes"},
            {},
            r"otel-spans\.enabled: invalid value 'yes'; expected true or false",
        ),
        (
            {"compression": "zstd"},
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:1"},
            r"otel-spans\.compression: invalid value 'zstd'; expected gzip or none",
        ),
        (
            {"headers": ["a"]},
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:1"},
            r"otel-spans\.headers: invalid value <list>; expected a mapping",
        ),
        (
            {"resource_attributes": {"a": [1]}},
            {},
            r"otel-spans\.resource-attributes: invalid value",
        ),
        ({"max_attribute_length": 0}, {}, r"otel-spans\.max-attribute-length: invalid value 0"),
        ({"max_events": -1}, {}, r"otel-spans\.max-events: invalid value -1; expected an integer"),
        (
            {"capture": {"code": "hidden"}},
            {},
            r"otel-spans\.capture\.code: invalid value 'hidden'; expected snippet, location",
        ),
        (
            {"capture": {"exceptions": False}},
            {},
            r"otel-spans\.capture\.exceptions: invalid value False; expected message or type",
        ),
        ({"service_name": ""}, {}, r"otel-spans\.service-name: invalid value ''"),
        ({"traces": "fast"}, {}, r"otel-spans\.traces: invalid value 'fast'; expected a mapping"),
        (
            {"endpont": "http://c:4317"},
            {},
            r"otel-spans\.endpont: unknown key; allowed keys here: .*endpoint",
        ),
        ({"traces": {"lingr": "1s"}}, {}, r"otel-spans\.traces\.lingr: unknown key"),
    ],
)
def test_bad_values_name_key_value_and_what_is_allowed(
    overrides: dict[str, Any], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve(env, **overrides)


def test_span_limits_follow_the_otel_variables_unless_set_here() -> None:
    assert resolve().record_limits == RecordLimits(4096, 128, 128, 128, 128, 128, 4096, 128)
    env = {
        "OTEL_ATTRIBUTE_COUNT_LIMIT": "64",
        "OTEL_SPAN_EVENT_COUNT_LIMIT": "10",
        "OTEL_SPAN_LINK_COUNT_LIMIT": "5",
        "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "100",
    }
    # the general variables apply to every record's attributes
    assert resolve(env).record_limits == RecordLimits(100, 64, 10, 5, 64, 64, 100, 64)
    assert resolve(env, max_events=3, max_attribute_count=7).record_limits == RecordLimits(
        100, 7, 3, 5, 64, 64, 100, 64
    )
    assert resolve(env).max_attribute_length == 100


def test_each_record_kind_has_its_own_limit_variable() -> None:
    """A span-specific variable limits spans only; events, links and log records each
    read their own, then the general one (the specification's layering)."""
    env = {
        "OTEL_ATTRIBUTE_COUNT_LIMIT": "64",
        "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "5",
        "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT": "6",
        "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT": "7",
        "OTEL_LOGRECORD_ATTRIBUTE_COUNT_LIMIT": "8",
        "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "90",
        "OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT": "80",
    }
    limits = resolve(env).record_limits
    assert limits == RecordLimits(90, 5, 128, 128, 6, 7, 80, 8)
    only_span = resolve({"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "5"}).record_limits
    assert (only_span.attribute_count, only_span.event_attribute_count) == (5, 128)
    assert (only_span.link_attribute_count, only_span.log_attribute_count) == (128, 128)
    keys = {"max_log_attribute_count": 3, "max_log_attribute_length": 30}
    assert resolve(env, **keys).record_limits == RecordLimits(90, 5, 128, 128, 6, 7, 30, 3)


def test_capture_defaults_keep_code_and_messages() -> None:
    assert resolve().capture == CaptureSettings("snippet", "message")
    capture = {"code": "location", "exceptions": "type"}
    assert resolve(capture=capture).capture == CaptureSettings("location", "type")


def test_secret_headers_are_not_echoed_in_warnings(caplog: pytest.LogCaptureFixture) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:1",
        "OTEL_EXPORTER_OTLP_HEADERS": "tok3n,x-tenant=t1",
    }
    with caplog.at_level(logging.WARNING, logger="otel_spans"):
        target = resolve(env).traces.target
    assert target.headers == {"x-tenant": "t1"}  # the valid entry is used
    (record,) = [r for r in caplog.records if "OTEL_EXPORTER_OTLP_HEADERS" in r.getMessage()]
    assert "tok3n" not in record.getMessage()


def test_dask_config_namespace_is_read() -> None:
    with dask.config.set({"otel-spans.endpoint": "http://from-dask-config:4317"}):
        s = Settings.from_config(environ={})
    assert s.traces.target.endpoint == "http://from-dask-config:4317"


def test_check_keys_on_client_side() -> None:
    check_keys({"endpoint": "x", "traces": {"linger": "1s"}})
    with pytest.raises(ConfigError, match="unknown key"):
        check_keys({"endpoints": "x"})


def test_metrics_settings_from_environment() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_METRIC_EXPORT_INTERVAL": "2500",
        "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "DELTA",
    }
    m = resolve(env).metrics
    assert m.target.kind == "otlp"
    assert m.target.endpoint == "http://c:4318/v1/metrics"
    assert m.interval == 2.5
    assert m.temporality == "delta"
    assert m.prometheus_port is None
    assert m.cpu_hour_price is None


def test_prometheus_exporter_from_environment() -> None:
    env = {"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1"}
    m = resolve(env).metrics
    assert m.target.kind == "none"
    assert (m.prometheus_host, m.prometheus_port) == ("127.0.0.1", 9464)
    m = resolve(metrics={"prometheus-port": 0, "cpu-hour-price": "0.04"}).metrics
    assert m.target.kind == "file"
    assert m.prometheus_port == 0
    assert m.prometheus_host == "localhost"  # the specification's default
    assert m.cpu_hour_price == 0.04
