"""The redaction helper and the headers parser (``otel_spans.redact``)."""

from __future__ import annotations

import logging

import pytest

from otel_spans import config
from otel_spans.config import ConfigError, Settings
from otel_spans.redact import has_userinfo, parse_headers, redact_url, strip_userinfo

SECRET = "Zq9-s3cr3t"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"http://alice:{SECRET}@c:4318/v1/traces", "http://alice:***@c:4318/v1/traces"),
        (f"https://{SECRET}@c", "https://***@c"),  # a token alone as user name
        (f"http://a:p@{SECRET}@c:1/x", "http://a:***@c:1/x"),  # a raw "@" in the password
        (f"http://a:{SECRET}@c:notaport", "http://a:***@c:notaport"),  # malformed: still
        ("http://c:4317/x?u=a@b", "http://c:4317/x?u=a@b"),  # "@" outside the authority
        ("http://c:4317", "http://c:4317"),
        (
            f"to http://a:{SECRET}@c:1 and https://b:{SECRET}@d/x failed",
            "to http://a:***@c:1 and https://b:***@d/x failed",
        ),
        ("exporting traces failed", "exporting traces failed"),
    ],
)
def test_redact_url_hides_the_password_and_keeps_the_rest(text: str, shown: str) -> None:
    assert redact_url(text) == shown


def test_strip_userinfo() -> None:
    assert strip_userinfo(f"http://a:{SECRET}@c:4317") == "http://c:4317"
    assert has_userinfo(f"http://a:{SECRET}@c:4317")
    assert not has_userinfo("http://c:4317/a@b")


def parse(text: str) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    warned: list[tuple[str, str, str]] = []
    headers = parse_headers("OTEL_EXPORTER_OTLP_HEADERS", text, lambda *w: warned.append(w))
    return headers, warned


def test_valid_entries_are_decoded_and_names_lower_cased() -> None:
    headers, warned = parse(f"Authorization=Bearer%20{SECRET}, x-tenant = t1 ,,k=a=b")
    assert headers == {"authorization": f"Bearer {SECRET}", "x-tenant": "t1", "k": "a=b"}
    assert warned == []


def test_a_space_and_a_slash_in_a_value_are_accepted_unencoded() -> None:
    value = f"Bearer {SECRET}/x=="
    assert parse(f"authorization={value}") == ({"authorization": value}, [])


def test_percent_encoding_per_the_specification() -> None:
    headers, _ = parse("a=%2Fpath%3Bx%22,b=caf%C3%A9,c=%2C")
    assert headers == {"a": '/path;x"', "c": ","}  # b decodes to non-ASCII: dropped


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (f'authorization="Bearer {SECRET}', "authorization"),  # stray quote in the value
        (f'"authorization=Bearer {SECRET}', "#1"),  # stray quote in the name
        (f"x=1,Bearer {SECRET}", "#2"),  # missing "="
        (f"={SECRET}", "#1"),  # empty name
        (f"authorization=a\\{SECRET}", "authorization"),  # "\\" must be encoded
        (f"authorization={SECRET}%0A", "authorization"),  # decodes to a control character
        (f"authorization={SECRET}%FF", "authorization"),  # not UTF-8
        (f"author ization={SECRET}", "#1"),  # not a token
    ],
)
def test_a_malformed_entry_is_dropped_naming_the_header_or_its_position(
    text: str, where: str
) -> None:
    headers, warned = parse(text)
    assert "authorization" not in headers
    ((variable, header, why),) = warned
    assert (variable, header) == ("OTEL_EXPORTER_OTLP_HEADERS", where)
    assert SECRET not in why and SECRET not in header


def test_a_malformed_variable_is_warned_about_once_without_its_value(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config._WARNED.clear()
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_HEADERS": f'authorization="Bearer {SECRET},x-tenant=t1',
    }
    with caplog.at_level(logging.DEBUG):
        settings = Settings.from_config({}, environ=env)
    assert settings.traces.target.headers == {"x-tenant": "t1"}
    assert [r.getMessage() for r in caplog.records] == [
        "otel-spans: ignoring OTEL_EXPORTER_OTLP_HEADERS: header authorization: the value "
        'must be URL-encoded (%22 for ", %3B for ;); the other entries are used'
    ]
    assert not any(SECRET in str(key) for key in config._WARNED)


@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": f"Bearer {SECRET}\n"},
        {f"Bearer {SECRET}": "x"},
        {"authorization": [SECRET]},
        [f"authorization: {SECRET}"],
    ],
)
def test_a_bad_headers_key_names_the_header_never_the_value(headers: object) -> None:
    with pytest.raises(ConfigError, match=r"^otel-spans\.headers: invalid value") as error:
        Settings.from_config({"headers": headers}, environ={})
    assert SECRET not in str(error.value)


def test_repr_and_describe_hide_headers_and_password() -> None:
    settings = Settings.from_config(
        {
            "endpoint": f"http://alice:{SECRET}@c:4318",
            "protocol": "http/protobuf",
            "headers": {"authorization": f"Bearer {SECRET}"},
        },
        environ={},
    )
    target = settings.traces.target
    assert target.endpoint == f"http://alice:{SECRET}@c:4318/v1/traces"  # still sent
    assert target.headers == {"authorization": f"Bearer {SECRET}"}
    assert SECRET not in repr(settings)
    assert "headers={'authorization': '***'}" in repr(target)
    assert target.describe() == "OTLP http/protobuf http://alice:***@c:4318/v1/traces"


def test_a_grpc_endpoint_loses_its_userinfo_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config._WARNED.clear()
    with caplog.at_level(logging.WARNING):
        target = Settings.from_config(
            {"endpoint": f"http://alice:{SECRET}@c:4317"}, environ={}
        ).traces.target
    assert target.endpoint == "http://c:4317"
    (message,) = [r.getMessage() for r in caplog.records]
    assert "http://alice:***@c:4317" in message and SECRET not in message
