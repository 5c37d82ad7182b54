"""The Prometheus series names otel-spans' instruments become over OTLP.

Shared by the tests that check names against the deploy files (dashboards, alerts) and
against real backends (Prometheus, VictoriaMetrics).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

import dask.config

from otel_spans.config import Settings
from otel_spans.telemetry.metric_state import MetricsState
from otel_spans.telemetry.metrics import HISTOGRAMS, Instruments

UNIT_SUFFIXES = {"s": "seconds", "By": "bytes", "1": "", "": ""}


def otlp_prometheus_name(name: str, unit: str, monotonic_counter: bool, gauge: bool = False) -> str:
    """Prometheus 3's OTLP name (translation_strategy UnderscoreEscapingWithSuffixes).

    A port of prometheus/otlptranslator's normalizeName for the units otel-spans
    uses: tokens of [a-zA-Z0-9:], the unit's word unless already a token, then
    ``total`` for monotonic counters. Annotations like ``{USD}`` carry no suffix; the
    unit ``1`` on a gauge becomes ``ratio``, as the translator has it.
    """
    tokens = [t for t in re.split(r"[^a-zA-Z0-9:]", name) if t]
    main = re.sub(r"\{[^}]*\}", "", unit)
    assert main in UNIT_SUFFIXES, f"{name}: unit {unit!r} needs a translation here"
    suffix = "ratio" if gauge and main == "1" else UNIT_SUFFIXES[main]
    if suffix and suffix not in tokens:
        tokens.append(suffix)
    if monotonic_counter:
        tokens = [t for t in tokens if t != "total"] + ["total"]
    return "_".join(tokens)


def otlp_label_name(attribute: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", attribute)


class RecordingMeter:
    """Stands in for an OTel Meter and records every instrument created on it."""

    def __init__(self) -> None:
        self.created: list[tuple[str, str, str]] = []  # (kind, name, unit)

    def __getattr__(self, method: str) -> Callable[..., None]:
        assert method.startswith("create_"), method

        def create(name: str, *args: Any, unit: str = "", **kwargs: Any) -> None:
            self.created.append((method.removeprefix("create_"), name, unit))

        return create


def otel_spans_instruments() -> list[tuple[str, str, str]]:
    """(kind, name, unit) of every instrument otel-spans creates, cost included."""
    with dask.config.set({"otel-spans": {}}):
        settings = Settings.from_config(overrides={"metrics": {"cpu-hour-price": 0.05}}, environ={})
    meter = RecordingMeter()
    Instruments(cast(Any, meter), MetricsState(settings.metrics), dict)
    assert len(meter.created) >= 10
    # aggregated outside the SDK (otel_spans/telemetry/histogram.py), added at export time
    return [*meter.created, *(("histogram", h.name, h.unit) for h in HISTOGRAMS)]


def expected_metric_names() -> set[str]:
    """Every Prometheus series name otel-spans' instruments become."""
    names = set()
    for kind, name, unit in otel_spans_instruments():
        if kind == "histogram":
            base = otlp_prometheus_name(name, unit, monotonic_counter=False)
            names |= {f"{base}_bucket", f"{base}_sum", f"{base}_count"}
        elif kind == "observable_gauge":
            names.add(otlp_prometheus_name(name, unit, monotonic_counter=False, gauge=True))
        else:
            assert kind in {"counter", "observable_counter"}, f"{name}: {kind} needs a rule here"
            names.add(otlp_prometheus_name(name, unit, monotonic_counter=True))
    return names
