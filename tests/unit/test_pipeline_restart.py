"""The exporter thread survives a failure of its own loop: detected, logged, counted."""

from __future__ import annotations

import logging

import pytest

from otel_spans.export.outcome import Delivery
from otel_spans.export.pipeline import ExportPipeline
from tests.servers.ports import wait_until


class BrokenOnce:
    """A send result whose bookkeeping fails the first time it is read."""

    def __init__(self) -> None:
        self.failed_once = False

    @property
    def exported(self) -> int:
        if not self.failed_once:
            self.failed_once = True
            raise RuntimeError("injected: bookkeeping failed")
        return 1

    failed = rejected = too_large = 0


def test_a_failed_loop_is_restarted_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    results: list[object] = [BrokenOnce(), Delivery(1), Delivery(1)]
    sent: list[list[int]] = []

    def send(batch: list[int]) -> Delivery:
        sent.append(batch)
        return results.pop(0)  # type: ignore[return-value]

    with caplog.at_level(logging.ERROR, logger="otel_spans"):
        pipeline: ExportPipeline[int] = ExportPipeline(
            "traces", send, lambda: None, queue_size=10, batch_size=1, batch_wait=1.0
        )
        pipeline.submit(1)
        wait_until(lambda: pipeline.stats().crashes == 1)
        # The loop runs again: later records are exported as before.
        pipeline.submit(2)
        pipeline.submit(3)
        wait_until(lambda: pipeline.stats().exported == 2)
        stats = pipeline.close(2.0)
    assert sent == [[1], [2], [3]]
    assert (stats.crashes, stats.exported, stats.failed) == (1, 2, 1)  # record 1 counted
    assert stats.submitted == stats.exported + stats.failed
    crashed = [r for r in caplog.records if "exporter thread failed" in r.getMessage()]
    assert len(crashed) == 1
    assert crashed[0].exc_info is not None
