"""The scheduler's OTLP request sender, aimed at a loopback receiver: one small request,
a sender, and the target of either protocol."""

from __future__ import annotations

from otel_spans.config import ExportTarget, RecordLimits
from otel_spans.export import wire as otlp_wire
from otel_spans.export.senders import RequestSender, make_request_sender
from tests.servers.otlp_receiver import OtlpReceiver

PROTOCOLS = ["grpc", "http/protobuf"]


def request(name: str = "sent") -> bytes:
    span = otlp_wire.span(
        name=name,
        trace_id=1,
        span_id=2,
        parent_span_id=0,
        start_ns=1,
        end_ns=2,
        attributes={"k": "v"},
        limits=RecordLimits(),
    )
    return otlp_wire.RequestEncoder({"service.name": "dask"}, "otel_spans").request([span])


def sender_for(target: ExportTarget, signal: str = "traces") -> RequestSender:
    return make_request_sender(target, signal=signal, role="t")


def target(
    rx: OtlpReceiver, protocol: str, signal: str = "traces", **overrides: object
) -> ExportTarget:
    endpoint = rx.grpc_endpoint if protocol == "grpc" else f"{rx.http_endpoint}/v1/{signal}"
    fields: dict[str, object] = {
        "kind": "otlp",
        "endpoint": endpoint,
        "protocol": protocol,
        "timeout": 10.0,
        "headers": {"x-tenant": "t1"},
    }
    fields.update(overrides)
    return ExportTarget(**fields)  # type: ignore[arg-type]
