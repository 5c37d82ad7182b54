"""Fixtures of the unit tests that resolve settings."""

from __future__ import annotations

from collections.abc import Iterator

import dask.config
import pytest

from otel_spans import config


@pytest.fixture
def clean_config() -> Iterator[None]:
    """No ``otel-spans`` key from the process's dask.config, and every test sees its
    own once-per-process warnings."""
    config._WARNED.clear()
    with dask.config.set({"otel-spans": {}}):
        yield
