"""Views of what the loopback OTLP receiver got, shared by the cluster tests."""

from __future__ import annotations

from typing import Any

from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import ReceivedMetricPoint, ReceivedSpan


def dask_spans(receiver: OtlpReceiver) -> list[ReceivedSpan]:
    """Only the spans of Dask spans (not their task groups, tasks and phases)."""
    return [s for s in receiver.spans() if "dask.span.id" in s.attributes]


def latest(points: list[ReceivedMetricPoint]) -> dict[tuple[str, tuple[Any, ...]], Any]:
    """The last value of every series (name, sorted attributes)."""
    out: dict[tuple[str, tuple[Any, ...]], tuple[int, Any]] = {}
    for p in points:
        series = (p.name, tuple(sorted(p.attributes.items())))
        if series not in out or p.time_ns >= out[series][0]:
            out[series] = (p.time_ns, p.value)
    return {k: v for k, (_, v) in out.items()}
