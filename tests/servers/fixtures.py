"""pytest fixtures for the real servers; load with
``pytest_plugins = ["tests.servers.fixtures"]`` in ``tests/conftest.py``.

Every fixture is function-scoped: servers start in well under a second, and
a fresh one per test means no test can see another's data or fault mode.
Teardown prints the external processes' logs; pytest shows that output only
for failing tests, which is exactly when it is needed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dask.config
import pytest

from .otlp_receiver import OtlpReceiver
from .prometheus import PrometheusServer
from .rotel import RotelCollector

__all__ = ["PrometheusFactory", "otlp_receiver", "prometheus", "rotel"]

#: ``prometheus(scrape_targets=..., **kwargs) -> started PrometheusServer``.
PrometheusFactory = Callable[..., PrometheusServer]


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A started :class:`OtlpReceiver` (plain gRPC + HTTP, mode "ok")."""
    receiver = OtlpReceiver().start()
    try:
        yield receiver
    finally:
        receiver.stop()


@pytest.fixture
def rotel(otlp_receiver: OtlpReceiver) -> Iterator[RotelCollector]:
    """A started rotel collector exporting everything to ``otlp_receiver``."""
    collector = RotelCollector(otlp_receiver.grpc_endpoint)
    try:
        collector.start()
        yield collector
    finally:
        collector.stop()
        print(f"--- rotel log ({collector.log_path}) ---\n{collector.log_text()}")
        collector.close()


@pytest.fixture
def prometheus() -> Iterator[PrometheusFactory]:
    """Factory starting :class:`PrometheusServer` instances; all stopped after.

    A factory because the scrape targets usually only exist inside the
    test (e.g. an :class:`~tests.servers.prometheus.ExpositionServer`).
    """
    servers: list[PrometheusServer] = []

    def make(scrape_targets: Sequence[str] = (), **kwargs: Any) -> PrometheusServer:
        server = PrometheusServer(scrape_targets, **kwargs)
        servers.append(server)
        return server.start()

    try:
        yield make
    finally:
        for server in servers:
            server.stop()
            print(f"--- prometheus log ({server.log_path}) ---\n{server.log_text()[-20000:]}")
            server.close()


@pytest.fixture
def default_otel_config() -> Iterator[None]:
    """The shipped ``otel-spans`` defaults, whatever the process's dask.config holds
    (use with ``pytestmark = pytest.mark.usefixtures("default_otel_config")``)."""
    with dask.config.set({"otel-spans": {}}):
        yield


@pytest.fixture
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No OTEL_* variable of the machine's, no warned-once memory, an empty
    ``otel-spans`` configuration: what settings resolve to is the test's alone."""
    from otel_spans import config

    config._WARNED.clear()
    for name in [v for v in os.environ if v.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    with dask.config.set({"otel-spans": {}}):
        yield
