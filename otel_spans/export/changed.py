"""Only the metric series that changed: what the metrics files write after the first line.

With cumulative temporality the SDK hands over every series it has ever seen at every
collection, idle or not; written as is, a scheduler that sits idle for a month fills
its disk with copies of the same values. :class:`ChangedSeries` keeps, per series, the
value last written and lets through only points whose value differs (timestamps and
exemplars aside), so an idle scheduler writes only the series that grow with time.

Readers take the latest point of each series across all files (a cumulative series:
the last value wins), which is still the last value written. So that a series
unchanged for weeks survives the deletion of the file it was last written in, the
first line of every new file holds every series (:meth:`ChangedSeries.select` with
``everything``). Delta points are written when they are not zero.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    ExponentialHistogramDataPoint,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
)

#: (resource, scope name, scope version, metric name, point attributes).
SeriesKey = tuple[Hashable, ...]


def _frozen(value: Any) -> Hashable:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value  # type: ignore[no-any-return]


def _value(point: object) -> Hashable:
    """What a point says, without when it was read (None: not comparable)."""
    if isinstance(point, NumberDataPoint):
        return point.value
    if isinstance(point, HistogramDataPoint):
        return (
            point.count,
            point.sum,
            tuple(point.bucket_counts),
            tuple(point.explicit_bounds),
            point.min,
            point.max,
        )
    if isinstance(point, ExponentialHistogramDataPoint):
        return (
            point.count,
            point.sum,
            point.scale,
            point.zero_count,
            point.positive.offset,
            tuple(point.positive.bucket_counts),
            point.negative.offset,
            tuple(point.negative.bucket_counts),
            point.min,
            point.max,
        )
    return None


def _is_zero_delta(point: object) -> bool:
    if isinstance(point, NumberDataPoint):
        return point.value == 0
    count = getattr(point, "count", None)
    return count == 0


@dataclass(frozen=True)
class Selection:
    """The points to write, and the state to keep once they are written."""

    data: MetricsData
    #: Data points in ``data``.
    points: int
    #: Every cumulative series of this collection, with the value it has now.
    seen: dict[SeriesKey, Hashable]


class ChangedSeries:
    """The last written value of each cumulative series of one exporter."""

    def __init__(self) -> None:
        #: At most one entry per series of the latest collection written (the SDK's own
        #: series, bounded by ``metrics.max-series`` per instrument); series gone from
        #: it are forgotten at the next commit.
        self._last: dict[SeriesKey, Hashable] = {}

    def select(self, data: MetricsData, *, everything: bool = False) -> Selection:
        """``data`` without the points unchanged since the last :meth:`commit`."""
        last = {} if everything else self._last
        seen: dict[SeriesKey, Hashable] = {}
        points = 0
        resources = []
        for rm in data.resource_metrics:
            resource = _frozen(dict(rm.resource.attributes))
            scopes = []
            for sm in rm.scope_metrics:
                scope = (resource, sm.scope.name, sm.scope.version)
                metrics = []
                for metric in sm.metrics:
                    kept = self._changed(metric, scope, last, seen)
                    if kept:
                        points += len(kept)
                        points_of = replace(metric.data, data_points=kept)  # type: ignore[arg-type]
                        metrics.append(replace(metric, data=points_of))
                if metrics:
                    scopes.append(replace(sm, metrics=metrics))
            if scopes:
                resources.append(replace(rm, scope_metrics=scopes))
        return Selection(MetricsData(resource_metrics=resources), points, seen)

    @staticmethod
    def _changed(
        metric: Metric,
        scope: tuple[Hashable, ...],
        last: Mapping[SeriesKey, Hashable],
        seen: dict[SeriesKey, Hashable],
    ) -> list[Any]:
        data = metric.data
        delta = getattr(data, "aggregation_temporality", None) == AggregationTemporality.DELTA
        kept = []
        for point in data.data_points:
            if delta:
                if not _is_zero_delta(point):
                    kept.append(point)
                continue
            value = _value(point)
            key = (*scope, metric.name, _frozen(dict(point.attributes or {})))
            if value is None or key not in last or last[key] != value:
                kept.append(point)
            seen[key] = value
        return kept

    def commit(self, selection: Selection) -> None:
        """The selection was written: its values are the last written from now on."""
        self._last = selection.seen
