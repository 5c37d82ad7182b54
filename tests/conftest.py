"""Shared fixtures: real loopback servers (OTLP receiver, rotel, Prometheus)."""

pytest_plugins = ["tests.servers.fixtures"]
