"""No secret is ever printed: header values, URL passwords, client key contents.

A distinct secret sits in every secret-bearing key and variable, in valid and
malformed forms. A real scheduler with the plugin and workers with the preload start,
export to a closed loopback port (so every sender warns), serve their pages and shut
down; every log record (all loggers, DEBUG and up), standard output and error, every
exception text, ``stats()``, ``repr`` of the settings, the workflows page and the
Prometheus page is searched for the secrets, plain, URL-encoded or inside base64. With
a real collector, the credentials arrive and no exported record quotes them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re
import traceback
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import dask.config
import pytest
from distributed import Client, Scheduler, Worker
from opentelemetry import trace

import otel_spans
from otel_spans.config import ConfigError, Settings
from otel_spans.scheduler.plugin import OtelSpansPlugin
from otel_spans.worker.plugin import OtelSpansWorkerPlugin
from tests.servers.otlp_receiver import SIGNALS, OtlpReceiver
from tests.servers.ports import free_port
from tests.support.cluster import await_until, cluster_test, stats, traced_cluster
from tests.support.tasks import inc

#: Every secret below contains this; alphanumeric, so that it is valid in a header
#: value and in a URL's userinfo alike.
BASE = "Qx7s3cr3tZ9w"


def secret(where: str) -> str:
    return f"{BASE}{where}"


def leaks(text: str) -> bool:
    """Whether ``text`` shows a secret: plain (any case), URL-encoded, or in base64
    (``Authorization: Basic`` carries ``user:password`` so)."""
    if BASE.lower() in text.lower() or BASE.lower() in unquote(text).lower():
        return True
    for token in re.findall(r"[A-Za-z0-9+/_-]{12,}={0,2}", text):
        for candidate in (token, token[1:], token[2:], token[3:]):
            body = candidate.rstrip("=")
            padded = body + "=" * (-len(body) % 4)
            for decode in (base64.b64decode, base64.urlsafe_b64decode):
                try:
                    if BASE.encode() in decode(padded):
                        return True
                except (binascii.Error, ValueError):
                    pass
    return False


def test_the_leak_check_finds_every_form() -> None:
    assert leaks(f"x {secret('a')} y") and leaks(f"{BASE.lower()}")
    assert leaks("Qx7s3cr3t%5A9w")
    basic = base64.b64encode(f"alice:{secret('b')}".encode()).decode()
    assert leaks(f"Authorization: Basic {basic}")
    assert leaks(base64.urlsafe_b64encode(f"xx{BASE}".encode()).decode())
    assert not leaks("http://alice:***@127.0.0.1:1/v1/traces")


@pytest.fixture(autouse=True)
def _clean(clean_otel_env: None) -> None:
    """Every test here starts without the machine's OTEL_* variables."""


@pytest.fixture
def key_file(tmp_path: Path) -> str:
    """A client key whose contents are a secret (not a real key: never read as one
    over plain http, but read all the same by gRPC credentials)."""
    path = tmp_path / "client.key"
    path.write_text(f"-----BEGIN PRIVATE KEY-----\n{secret('key-file')}\n")
    return str(path)


def malformed_env(monkeypatch: pytest.MonkeyPatch, key_file: str) -> None:
    """Every headers variable, valid or malformed, each with its own secret."""
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_HEADERS", f'authorization="Bearer {secret("general")},x-tenant=t1'
    )
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"authorization=Bearer%20{secret('traces')}"
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_HEADERS", f"x=1,Bearer {secret('metrics')}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_HEADERS", f"={secret('logs')},y=2")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", key_file)


def user_span() -> int:
    """A task that starts a span of its own: the worker's SDK exporter has work."""
    with trace.get_tracer("test-secrets").start_as_current_span("user-span"):
        return 1


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def seen_in_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every record's message, arguments and exception, as text."""
    texts = [caplog.text]
    for record in caplog.records:
        texts += [record.getMessage(), repr(record.args), record.exc_text or ""]
        if record.exc_info and record.exc_info[1] is not None:
            texts.append("".join(traceback.format_exception(record.exc_info[1])))
    return texts


SCENARIOS = pytest.mark.parametrize(
    ("source", "protocol"),
    [("variables", "http/protobuf"), ("keys", "grpc"), ("keys", "http/protobuf")],
)


@SCENARIOS
@cluster_test(90)
async def test_no_secret_in_logs_stats_repr_or_pages(
    source: str,
    protocol: str,
    key_file: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    closed = free_port()  # nothing listens there: every export fails
    malformed_env(monkeypatch, key_file)
    # Keys: TLS, so that the client key is read (gRPC credentials, requests' cert).
    scheme = "http" if source == "variables" else "https"
    url = f"{scheme}://alice:{secret('url-' + source)}@127.0.0.1:{closed}"
    cfg: dict[str, Any] = {
        "distributed.worker.preload": ["otel_spans"],
        "otel-spans.timeout": "1s",
        "otel-spans.shutdown-timeout": "1s",
        "otel-spans.metrics.interval": "200ms",
        "otel-spans.metrics.prometheus-port": 0,
        "otel-spans.metrics.prometheus-host": "127.0.0.1",
    }
    if source == "variables":
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    else:
        cfg |= {
            "otel-spans.endpoint": url,
            "otel-spans.protocol": protocol,
            "otel-spans.headers": {"authorization": f"Bearer {secret('key')}"},
            "otel-spans.client-key": key_file,
            "otel-spans.client-certificate": key_file,
        }
    seen: list[str] = []
    caplog.set_level(logging.DEBUG)
    async with traced_cluster(cfg) as (client, scheduler, workers):
        with otel_spans.span("secrets"):
            assert await client.submit(inc, 1, key="inc-0") == 2
            assert await client.submit(user_span, key="user-span-0", pure=False) == 1
        counts = await await_until(
            lambda: _failed(client), 30, lambda: "no export failed against the closed port"
        )
        plugin = scheduler.plugins["otel-spans"]
        assert isinstance(plugin, OtelSpansPlugin)
        settings = plugin.settings
        assert settings is not None and settings.traces.target.kind == "otlp"
        seen += [repr(settings), str(settings), repr(counts), repr(plugin.stats())]
        seen += [repr(w.plugins["otel-spans"].stats()) for w in workers]  # type: ignore[attr-defined]
        seen.append(repr(Settings.from_config()))  # as a worker resolves them
        page = f"http://127.0.0.1:{scheduler.http_server.port}/otel-spans/workflows"
        prometheus = f"http://127.0.0.1:{counts['prometheus_port']}/metrics"
        for address in (page, page + "?format=json", prometheus):
            seen.append(await asyncio.to_thread(fetch, address))
    seen += [*seen_in_logs(caplog), *capfd.readouterr()]  # gRPC's C core writes to fd 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    # The failures were said, with the endpoint shown and its password hidden ...
    assert any(f"alice:***@127.0.0.1:{closed}" in m for m in warnings), warnings
    # ... and each malformed headers variable named, when it was read.
    if source == "variables":
        for name in ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_LOGS_HEADERS"):
            assert any(name in m for m in warnings), (name, warnings)
    leaked = [text for text in seen if leaks(text)]
    assert leaked == []


async def _failed(client: Client) -> dict[str, Any] | None:
    counts = await stats(client)
    return counts if counts["traces"]["failed"] and counts["logs"]["failed"] else None


BAD_KEYS: list[dict[str, Any]] = [
    {"headers": {"authorization": f"Bearer {secret('newline')}\n"}},
    {"headers": {f"Bearer {secret('as-name')}": "x"}},
    {"headers": [f"authorization: {secret('list')}"]},
    {"endpoint": f"http://alice:{secret('bad-url')}@127.0.0.1:notaport"},
    {"endpoint": f"ftp://alice:{secret('bad-scheme')}@127.0.0.1:1"},
]


@pytest.mark.parametrize("bad", BAD_KEYS)
@cluster_test(60)
async def test_a_start_failing_on_a_secret_bearing_key_names_the_key_only(
    bad: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []
    async with Scheduler(host="127.0.0.1", dashboard_address=":0", port=0) as scheduler:
        with pytest.raises(ConfigError) as failed:
            await scheduler.register_scheduler_plugin(OtelSpansPlugin(**bad), idempotent=False)
        seen.append("".join(traceback.format_exception(failed.value)))
        assert str(failed.value).startswith(f"otel-spans.{next(iter(bad))}: invalid value")
        with dask.config.set({f"otel-spans.{k}": v for k, v in bad.items()}):
            async with Worker(scheduler.address, host="127.0.0.1", nthreads=1) as worker:
                with pytest.raises(ConfigError) as on_worker:
                    OtelSpansWorkerPlugin().setup(worker)
        seen.append("".join(traceback.format_exception(on_worker.value)))
    seen += seen_in_logs(caplog)
    assert [text for text in seen if leaks(text)] == []


@cluster_test(90)
async def test_credentials_reach_the_collector_and_no_record_carries_them(
    otlp_receiver: OtlpReceiver,
    key_file: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Over OTLP/HTTP the URL's credentials go as basic authentication and the headers
    as headers, from the scheduler and the workers; no exported record quotes them."""
    malformed_env(monkeypatch, key_file)
    user, password = "alice", secret("url-ok")
    base = otlp_receiver.http_endpoint.replace("http://", f"http://{user}:{password}@")
    cfg: dict[str, Any] = {
        "distributed.worker.preload": ["otel_spans"],
        "otel-spans.endpoint": base,
        "otel-spans.protocol": "http/protobuf",
        "otel-spans.headers": {"x-api-key": secret("key-ok")},
        "otel-spans.metrics.interval": "200ms",
        "otel-spans.logs.python.loggers": ["distributed", "otel_spans", "tests"],
        "otel-spans.logs.python.level": "DEBUG",
    }
    caplog.set_level(logging.DEBUG)
    async with traced_cluster(cfg) as (client, _, _):
        with otel_spans.span("secrets-ok"):
            assert await client.submit(user_span, key="user-span-0", pure=False) == 1

        def received() -> bool:
            spans = {s.name for s in otlp_receiver.spans()}
            signals = {r.signal for r in otlp_receiver.records()}
            return {"secrets-ok", "user-span"} <= spans and signals == set(SIGNALS)

        await await_until(received, 30, lambda: f"received {otlp_receiver.records()}")
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    for record in otlp_receiver.records():
        assert record.headers["authorization"] == f"Basic {basic}", record.signal
        assert record.headers["x-api-key"] == secret("key-ok"), record.signal
        # the variables' headers are set aside: the key decides
        assert not {"x-tenant", "x", "y"} & set(record.headers), record.signal
    exported = [str(record.request) for record in otlp_receiver.records()]
    assert [text for text in exported + seen_in_logs(caplog) if leaks(text)] == []
