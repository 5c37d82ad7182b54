"""What leaves the process. Never imports distributed, nor the scheduler or telemetry side.

The bounded hand-off to exporter threads (:mod:`.pipeline`), the OTLP protobuf writer
for pre-encoded spans and logs (:mod:`.wire`) and their gRPC/HTTP senders
(:mod:`.senders`), the OTel SDK's exporters (:mod:`.sdk`), the Prometheus endpoint
(:mod:`.prometheus`), the resource (:mod:`.resource`), TLS material (:mod:`.tls`) and
OTLP/JSON files (:mod:`.files`).
"""
