"""docs/telemetry.md is the contract: every name in semconv.py must be documented there."""

from __future__ import annotations

from pathlib import Path

from otel_spans import semconv

DOC = Path(__file__).parents[1] / "docs" / "telemetry.md"


def emitted_names() -> dict[str, str]:
    return {
        name: value
        for name, value in vars(semconv).items()
        if name.isupper() and isinstance(value, str) and not name.startswith("DEFAULT_")
    }


def test_every_semconv_name_is_documented() -> None:
    text = DOC.read_text()
    missing = {
        name: value
        for name, value in emitted_names().items()
        if f"`{value}`" not in text and not value.endswith(".")
    }
    assert not missing, f"not in docs/telemetry.md: {missing}"


def test_prefix_constants_are_documented_as_patterns() -> None:
    text = DOC.read_text()
    for name, value in emitted_names().items():
        if value.endswith("."):
            assert f"`{value}<" in text, name
