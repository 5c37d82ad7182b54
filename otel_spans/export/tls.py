"""TLS material for OTLP over gRPC and HTTP, from the configured files."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


def http_session(target: ExportTarget) -> Any:
    """A ``requests`` session that verifies against the configured CA, or None.

    ``requests`` lets ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` replace the CA a session
    was given (they win over ``Session.verify``), so a configured ``certificate`` would
    be silently ignored wherever those are set, as on many CI images and corporate
    machines. This session keeps the configured CA and still honours proxy variables.
    """
    if target.certificate is None:
        return None
    import requests

    class PinnedCaSession(requests.Session):
        def merge_environment_settings(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            merged: dict[str, Any] = super().merge_environment_settings(*args, **kwargs)
            merged["verify"] = self.verify
            return merged

    return PinnedCaSession()
