"""A fresh loopback OTLP receiver per test, for the sender tests that set its modes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.servers.otlp_receiver import OtlpReceiver


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as rx:
        yield rx
