"""Reading exported telemetry back: loading OTLP/JSON and summarising it."""
