"""Where the scheduler's already-encoded OTLP trace, log and metric requests go.

The one factory, :func:`make_request_sender`, turns an export target into a
:class:`RequestSender`: a collector over gRPC (:mod:`.grpc_sender`) or HTTP/protobuf
(:mod:`.http_sender`), both following the OTLP exporter specification through
:mod:`.otlp_retry` (:func:`make_otlp_sender`, which the metric exporter uses too);
OTLP/JSON files (:mod:`.files`); stdout (:mod:`.console`); or nowhere. The telemetry
side sees only this module's protocol and factory.
"""

from __future__ import annotations

from typing import Protocol

from otel_spans.export.console import ConsoleSender, TeeSender
from otel_spans.export.files import FileSender, writer_for
from otel_spans.export.grpc_sender import GrpcSender
from otel_spans.export.http_sender import HttpSender
from otel_spans.export.http_session import http_session
from otel_spans.export.otlp_retry import OtlpSender
from otel_spans.export.outcome import ACCEPTED, Sent
from otel_spans.export.tls import grpc_credentials
from otel_spans.settings import ExportTarget


class RequestSender(Protocol):
    """Sends one serialized export request: to a collector, a file, or nowhere."""

    def send(self, request: bytes) -> Sent: ...

    def shutdown(self) -> None: ...


class _NoSender:
    def send(self, request: bytes) -> Sent:
        return ACCEPTED

    def shutdown(self) -> None:
        pass


def make_request_sender(target: ExportTarget, *, signal: str, role: str) -> RequestSender:
    """Where the scheduler's pre-encoded ``signal`` requests (``traces``, ``logs``) go.

    Workers' spans go through the SDK's exporters (:mod:`otel_spans.export.sdk`).
    """
    primary = _primary_sender(target, signal=signal, role=role)
    if not target.console:
        return primary
    console = ConsoleSender(signal)
    return console if target.kind == "none" else TeeSender(primary, console)


def _primary_sender(target: ExportTarget, *, signal: str, role: str) -> RequestSender:
    if target.kind == "none":
        return _NoSender()
    if target.kind == "file":
        return FileSender(writer_for(target, signal, role), signal)
    return make_otlp_sender(target, signal=signal)


def make_otlp_sender(target: ExportTarget, *, signal: str) -> OtlpSender:
    """The sender of ``signal`` to the collector ``target`` names (gRPC or HTTP/protobuf)."""
    if target.protocol == "grpc":
        return GrpcSender(target, signal, grpc_credentials(target))
    return HttpSender(target, signal, http_session(target))
