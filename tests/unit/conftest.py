"""Fixtures of the unit tests: settings resolved afresh, and a receiver for the
benchmarks' measurements."""

from __future__ import annotations

from collections.abc import Iterator

import dask.config
import pytest

from otel_spans import config
from tests.servers.otlp_receiver import OtlpReceiver


@pytest.fixture
def clean_config() -> Iterator[None]:
    """No ``otel-spans`` key from the process's dask.config, and every test sees its
    own once-per-process warnings."""
    config._WARNED.clear()
    with dask.config.set({"otel-spans": {}}):
        yield


@pytest.fixture(scope="module")
def otlp_endpoint() -> Iterator[str]:
    """A loopback OTLP/gRPC receiver's endpoint, for a module's benchmark measurements."""
    with OtlpReceiver() as receiver:
        yield receiver.grpc_endpoint
