"""Whether an open Dask span is done, without walking its whole subtree on every poll.

Dask's ``Span.done`` visits every task group below the span, and a root is re-checked
whenever any of its descendants had a transition: with 1,000 sub-spans that is 1,000
groups per check. Its own module because this shortcut rests on invariants of the
tracker's state (what "no longer open" and ``done_since`` mean) that deserve to be read
apart from the poll that calls it (:meth:`~otel_spans.scheduler.tracking.SpanTracker.poll`).
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import TYPE_CHECKING

from otel_spans.scheduler.snapshots import group_done
from otel_spans.scheduler.span_state import TrackedSpan

if TYPE_CHECKING:
    from distributed.spans import Span


def is_done(
    span: Span,
    changed: set[str],
    memo: dict[str, bool],
    open_spans: Container[str],
    tracks: Mapping[str, TrackedSpan],
) -> bool:
    """``Span.done`` from the span's own groups and what is known of its children.

    A span is done when its own groups are, and each child is: a child that is no
    longer in ``open_spans`` was exported done (any later transition would have
    reopened it) unless shutdown exported it unfinished, a child outside ``changed``
    had no transition since it was last checked, and only the other children are
    looked at again, once per poll (``memo``).
    """
    known = memo.get(span.id)
    if known is not None:
        return known
    result = all(map(group_done, span.groups))  # TaskGroup.done, without its generator
    for child in span.children:
        if not result:
            break
        if child.id not in open_spans:
            # exported: done unless it was exported unfinished (at shutdown)
            child_track = tracks.get(child.id)
            result = child_track is None or child_track.exported_at is not None
            continue
        if child.id in changed:
            result = is_done(child, changed, memo, open_spans, tracks)
        else:
            track = tracks.get(child.id)
            result = track is not None and track.done_since is not None
    memo[span.id] = result
    return result
