"""TLS material for OTLP over gRPC, from the configured files (HTTP's session, with
its pinned CA, is :mod:`.http_session`'s)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_spans.settings import ExportTarget

if TYPE_CHECKING:
    import grpc


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def grpc_credentials(target: ExportTarget) -> grpc.ChannelCredentials | None:
    """TLS credentials from the configured files; None lets the scheme decide."""
    import grpc

    if not (target.certificate or target.client_certificate):
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_read(target.certificate),
        private_key=_read(target.client_key),
        certificate_chain=_read(target.client_certificate),
    )
