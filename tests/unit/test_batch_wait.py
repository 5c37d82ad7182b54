"""How long a batch waits to fill, per signal: ``traces.batch-wait`` (the OTel
specification's ``OTEL_BSP_SCHEDULE_DELAY``, 5 s) and ``logs.batch-wait``
(``OTEL_BLRP_SCHEDULE_DELAY``, 1 s). A request costs CPU whatever it holds, so the wait
decides how often a service that runs one small workflow after another pays for one."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import dask.config
import pytest

from otel_spans import config
from otel_spans.config import ConfigError, Settings


@pytest.fixture(autouse=True)
def _clean_config() -> Iterator[None]:
    config._WARNED.clear()  # every test sees its own once-per-process warnings
    with dask.config.set({"otel-spans": {}}):
        yield


def resolve(env: dict[str, str] | None = None, **overrides: Any) -> Settings:
    return Settings.from_config(overrides, environ=env or {})


def waits(settings: Settings) -> tuple[float, float]:
    return settings.traces.batch_wait, settings.logs.batch_wait


def test_each_signal_waits_the_specifications_default() -> None:
    assert waits(resolve()) == (5.0, 1.0)


def test_the_specifications_variables_are_milliseconds() -> None:
    env = {"OTEL_BSP_SCHEDULE_DELAY": "250", "OTEL_BLRP_SCHEDULE_DELAY": "1500"}
    assert waits(resolve(env)) == (0.25, 1.5)


def test_an_otel_spans_key_beats_the_variable() -> None:
    env = {"OTEL_BSP_SCHEDULE_DELAY": "250", "OTEL_BLRP_SCHEDULE_DELAY": "1500"}
    settings = resolve(env, traces={"batch-wait": "2s"}, logs={"batch-wait": "100ms"})
    assert waits(settings) == (2.0, 0.1)
    # null is "not set here": the variable decides
    assert waits(resolve(env, traces={"batch-wait": None})) == (0.25, 1.5)


@pytest.mark.parametrize("value", [0, "0s", "-1s", "61s", "2m", "soon", True])
@pytest.mark.parametrize("signal", ["traces", "logs"])
def test_a_bad_key_raises_naming_it(signal: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=rf"otel-spans\.{signal}\.batch-wait: invalid value"):
        resolve(**{signal: {"batch-wait": value}})


@pytest.mark.parametrize("value", ["0", "-5", "soon", "nan", "60001", "inf"])
@pytest.mark.parametrize(
    ("name", "default"), [("OTEL_BSP_SCHEDULE_DELAY", 5.0), ("OTEL_BLRP_SCHEDULE_DELAY", 1.0)]
)
def test_a_bad_variable_is_warned_about_once_and_the_default_kept(
    name: str, default: float, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_spans"):
        first = resolve({name: value})
        resolve({name: value})  # a second scheduler, worker or client in the process
    assert default in waits(first)
    (warning,) = [r.getMessage() for r in caplog.records if name in r.getMessage()]
    assert value in warning and "milliseconds" in warning


def test_the_bounds_themselves_are_allowed() -> None:
    assert waits(resolve({"OTEL_BSP_SCHEDULE_DELAY": "60000"})) == (60.0, 1.0)
    assert waits(resolve(traces={"batch-wait": "1ms"}, logs={"batch-wait": 60})) == (0.001, 60.0)

