"""How long a batch waits to fill, per signal: ``traces.batch-wait`` (the OTel
specification's ``OTEL_BSP_SCHEDULE_DELAY``, 5 s) and ``logs.batch-wait``
(``OTEL_BLRP_SCHEDULE_DELAY``, 1 s). A request costs CPU whatever it holds, so the wait
decides how often a service that runs one small workflow after another pays for one."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from otel_spans.config import ConfigError, Settings
from otel_spans.export.pipeline import ExportPipeline
from tests.servers.ports import wait_until
from tests.support.settings import resolve

pytestmark = pytest.mark.usefixtures("clean_config")


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


# -- the pipeline ---------------------------------------------------------------------------


class Recorder:
    """A ``send`` that records when each batch arrived."""

    def __init__(self) -> None:
        self.batches: list[tuple[float, list[int]]] = []
        self.lock = threading.Lock()

    def __call__(self, batch: list[int]) -> bool:
        with self.lock:
            self.batches.append((time.monotonic(), batch))
        return True

    def sent(self) -> list[int]:
        with self.lock:
            return [item for _, batch in self.batches for item in batch]


def pipeline(recorder: Recorder, wait: float, batch_size: int = 100) -> ExportPipeline[int]:
    return ExportPipeline(
        "traces", recorder, lambda: None, queue_size=1000, batch_size=batch_size, batch_wait=wait
    )


def test_a_batch_waits_the_configured_time_before_it_is_sent() -> None:
    recorder = Recorder()
    p = pipeline(recorder, wait=0.3)
    try:
        submitted = time.monotonic()
        p.submit(1)  # the first record starts the thread, which then waits
        p.submit(2)
        wait_until(lambda: recorder.sent() == [1, 2])
        ((at, _),) = recorder.batches
        assert at - submitted >= 0.3 * 0.95  # one batch, sent after the wait, not before
    finally:
        p.close(5.0)


def test_a_full_batch_does_not_wait() -> None:
    recorder = Recorder()
    p = pipeline(recorder, wait=60.0, batch_size=3)
    try:
        for i in range(3):
            p.submit(i)
        wait_until(lambda: recorder.sent() == [0, 1, 2])  # long before 60 s
    finally:
        p.close(5.0)


def test_close_sends_what_is_queued_without_waiting() -> None:
    recorder = Recorder()
    p = pipeline(recorder, wait=60.0)
    p.submit(1)
    started = time.monotonic()
    stats = p.close(30.0)
    assert time.monotonic() - started < 10.0  # not the 60 s wait, nor the 30 s budget
    assert recorder.sent() == [1]
    assert stats.exported == 1 and stats.lost == 0
