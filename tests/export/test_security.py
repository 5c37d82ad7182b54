"""Secure transport, and what may leave the cluster.

Real TLS on loopback: the receiver serves gRPC and HTTP with a server certificate from
a CA made in the test, optionally requiring client certificates (mutual TLS). What
went over the wire is checked as decoded protobufs and as raw bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import certifi
import pytest
from distributed import Client, span

from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.tls import TestPki, TestPkiFiles, make_test_pki
from tests.support.cluster import await_until, cluster_test, stats, traced_cluster
from tests.support.tasks import inc

SECRET = "s3cr3t-t0ken-Zq9"


@pytest.fixture(scope="module")
def pki() -> TestPki:
    return make_test_pki()


@pytest.fixture
def pki_files(pki: TestPki, tmp_path: Path) -> TestPkiFiles:
    return pki.write(tmp_path / "pki")


@pytest.fixture
def tls_receiver(pki: TestPki) -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver(tls_cert=pki.server_cert, tls_key=pki.server_key).start()
    try:
        yield receiver
    finally:
        receiver.stop()


@pytest.fixture
def mtls_receiver(pki: TestPki) -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver(
        tls_cert=pki.server_cert, tls_key=pki.server_key, client_ca=pki.ca_cert
    ).start()
    try:
        yield receiver
    finally:
        receiver.stop()


def endpoint(receiver: OtlpReceiver, protocol: str) -> str:
    return receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint


async def one_span(client: Client, name: str) -> None:
    with span(name):
        assert await client.submit(inc, 1, key=f"inc-{name}") == 2


PROTOCOLS = pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])


@PROTOCOLS
@cluster_test(60)
async def test_tls_with_a_custom_ca_and_auth_headers_from_the_environment(
    tls_receiver: OtlpReceiver,
    pki_files: TestPkiFiles,
    protocol: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer%20{SECRET},x-tenant=t1")
    # Another trust store in the environment (as on many CI images) must not replace
    # the configured CA.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", certifi.where())
    monkeypatch.setenv("CURL_CA_BUNDLE", certifi.where())
    config = {
        "otel-spans.endpoint": endpoint(tls_receiver, protocol),
        "otel-spans.protocol": protocol,
        "otel-spans.certificate": str(pki_files.ca_cert),
    }
    async with traced_cluster(config) as (client, _, _):
        await one_span(client, "over tls")
        await await_until(lambda: {s.name for s in tls_receiver.spans()} >= {"over tls"})
    assert tls_receiver.tls and tls_receiver.grpc_endpoint.startswith("https://")
    headers = tls_receiver.headers("traces")
    assert headers and all(h["authorization"] == f"Bearer {SECRET}" for h in headers)
    assert all(h["x-tenant"] == "t1" for h in headers)
    # metrics and logs use the same transport settings
    assert {r.transport for r in tls_receiver.records()} == {
        "grpc" if protocol == "grpc" else "http"
    }


@PROTOCOLS
@cluster_test(60)
async def test_mutual_tls_needs_the_client_certificate(
    mtls_receiver: OtlpReceiver,
    pki_files: TestPkiFiles,
    protocol: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    base = {
        "otel-spans.endpoint": endpoint(mtls_receiver, protocol),
        "otel-spans.protocol": protocol,
        "otel-spans.certificate": str(pki_files.ca_cert),
        "otel-spans.headers": {"authorization": f"Bearer {SECRET}"},
        "otel-spans.timeout": "2s",
        "otel-spans.shutdown-timeout": "1s",
        "otel-spans.metrics.exporter": "none",
    }
    caplog.set_level(logging.DEBUG)
    # Without a client certificate the handshake fails: counted, nothing received.
    async with traced_cluster(base) as (client, _, _):
        await one_span(client, "no client cert")
        await await_until(lambda: _failed(client), timeout=30)
    assert mtls_receiver.records() == []

    with_cert = {
        **base,
        "otel-spans.client-certificate": str(pki_files.client_cert),
        "otel-spans.client-key": str(pki_files.client_key),
    }
    async with traced_cluster(with_cert) as (client, _, _):
        await one_span(client, "with client cert")
        await await_until(lambda: {s.name for s in mtls_receiver.spans()} >= {"with client cert"})
        assert (await stats(client))["traces"]["failed"] == 0
    # The failures were logged, the token never.
    failures = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and "otel-spans" in r.getMessage()
    ]
    assert any("traces" in message for message in failures), failures
    assert SECRET not in caplog.text


async def _failed(client: Client) -> bool:
    return bool((await stats(client))["traces"]["failed"])


def fail_with(value: str) -> None:
    raise ValueError(f"cannot parse {value!r}")


#: Only ever in task results. Module constants, so that the test function's source,
#: which Dask sends as the code snippet, does not quote it.
RESULT_CANARY = "RESULT-CANARY"


def shout(value: str) -> str:
    return f"{value.upper()}-{RESULT_CANARY}"


def raw_bytes(receiver: OtlpReceiver) -> bytes:
    return b"".join(r.request.SerializeToString() for r in receiver.records())


@pytest.mark.parametrize("redacted", [False, True], ids=["defaults", "redacted"])
@cluster_test(60)
async def test_capture_switches_and_no_task_data_on_the_wire(
    otlp_receiver: OtlpReceiver, redacted: bool
) -> None:
    config: dict[str, Any] = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.traces.tasks.mode": "all",
        "otel-spans.metrics.interval": "200ms",
        "distributed.diagnostics.computations.nframes": 1,
    }
    if redacted:
        config["otel-spans.capture"] = {"code": "none", "exceptions": "type"}
    async with traced_cluster(config) as (client, scheduler, _):
        with span("sensitive"):
            bad = client.submit(fail_with, "ARG-CANARY-1", key="parse-1")
            good = client.submit(shout, "arg-canary-2", key="shout-1")
            assert await good == shout("arg-canary-2")  # no result literal in this snippet
            with pytest.raises(ValueError, match="ARG-CANARY-1"):
                await bad
        # A Dask event shaped like distributed's own error reports.
        scheduler.log_event(
            "custom", {"action": "failed", "exception_text": "ValueError('EVENT-CANARY')"}
        )
        await await_until(
            lambda: (
                {"parse", "shout"} <= {s.name for s in otlp_receiver.spans()}
                and any(
                    log.attributes.get("dask.event.topic") == "custom"
                    for log in otlp_receiver.logs()
                )
                and otlp_receiver.metrics()
            )
        )
    wire = raw_bytes(otlp_receiver)
    # Arguments reach the wire only through the client code snippet or an exception
    # message that quotes them, and results never.
    assert RESULT_CANARY.encode() not in wire
    spans = {s.name: s for s in otlp_receiver.spans()}
    parse = next(s for s in otlp_receiver.spans() if s.attributes.get("dask.task.key") == "parse-1")
    exception = next(e for e in parse.events if e.name == "exception")
    erred_log = next(log for log in otlp_receiver.logs() if log.event_name == "dask.task.erred")
    if redacted:
        assert b"CANARY" not in wire
        assert exception.attributes == {"exception.type": "ValueError"}
        assert erred_log.body == "Task parse-1 erred: ValueError"
        assert parse.status_message == ""  # the type is error.type's
        assert parse.attributes["error.type"] == "ValueError"
        assert "dask.span.code.snippet" not in spans["sensitive"].attributes
        assert "code.file.path" not in spans["sensitive"].attributes
    else:
        assert b"ARG-CANARY-1" in wire and b"EVENT-CANARY" in wire
        assert "ARG-CANARY-1" in exception.attributes["exception.message"]
        assert "fail_with" in exception.attributes["exception.stacktrace"]
        assert "ARG-CANARY-1" in erred_log.body
        assert "arg-canary-2" in spans["sensitive"].attributes["dask.span.code.snippet"]
