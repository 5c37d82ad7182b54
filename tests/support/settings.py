"""Settings resolved for a test: given keys over the shipped defaults, and a given
environment instead of the process's."""

from __future__ import annotations

from typing import Any

from otel_spans.config import Settings


def resolve(env: dict[str, str] | None = None, **overrides: Any) -> Settings:
    return Settings.from_config(overrides, environ=env or {})
