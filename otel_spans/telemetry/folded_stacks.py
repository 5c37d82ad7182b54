"""Dask's statistical profiles become folded stacks: the text flame graphs are drawn from.

A worker samples the stacks of its task threads every 10 ms and sums them, per task
prefix, into a call tree (``distributed.profile``: nested dicts whose ``count`` is the
samples through a frame). The workers' trees of one prefix are folded here into one
line per distinct stack, ``frame;frame;frame <self samples>`` (Brendan Gregg's collapsed
format, which flamegraph.pl, speedscope and ``otel-spans report`` read), heaviest first.

The trees come from the workers, so anything in them may be malformed: a bad node is
skipped, never raised about. Folding runs on the logs exporter thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from otel_spans import semconv
from otel_spans.records import LogEntry, ProfileRecord

#: The line that sums the stacks beyond ``profile-max-length``.
OTHER_STACKS = "(other stacks)"
#: Samples whose running frame was one of several outermost frames (see :func:`fold`).
UNKNOWN_FRAME = "(one of the outermost frames)"
#: Frames kept per stack, outermost first (deeper frames are counted at the last kept).
MAX_DEPTH = 128
#: Package roots whose path before them says nothing (site-packages/pandas/... -> pandas/...).
_PACKAGE_ROOTS = ("site-packages/", "dist-packages/")


def frame_label(node: Mapping[str, Any]) -> str:
    """``function (file:line)`` of one profile frame, safe inside folded stacks.

    The line is the function's first line, from Dask's frame identifier
    (``name;filename;first line``): the ``description`` has the line being run when the
    frame was first sampled, which differs between workers for the same function.
    """
    identifier = node.get("identifier")
    parts = identifier.split(";") if isinstance(identifier, str) else []
    if len(parts) == 3:
        name, filename, line = parts
    else:
        description = node.get("description")
        if not isinstance(description, Mapping):
            description = {}
        name = str(description.get("name", identifier))
        filename = str(description.get("filename", ""))
        line = str(description.get("line_number", ""))
    for root in _PACKAGE_ROOTS:
        cut = filename.rfind(root)
        if cut >= 0:
            filename = filename[cut + len(root) :]
            break
    label = f"{name} ({filename}:{line})" if filename else name
    return label.replace(";", ",").replace("\n", " ")


def _count(node: Mapping[str, Any]) -> int:
    count = node.get("count", 0)
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def fold(trees: Iterable[object]) -> dict[str, int]:
    """Samples by stack over all ``trees`` (one per worker).

    Dask's trees count a sample on every frame *above* the one running, not on that
    frame itself (``distributed.profile.process`` with ``child=True``): a frame's
    ``count`` minus its children's is the samples that ran in one of its direct
    callees. With one callee that is exact, and the samples go to the callee's stack;
    with several they cannot be told apart, and stay on the calling frame (as Dask's
    own profile page shows them). The total is always the root's count.
    """
    stacks: dict[str, int] = {}
    for tree in trees:
        if not isinstance(tree, Mapping):
            continue
        todo: list[tuple[Mapping[str, Any], str, int]] = [(tree, "", 0)]
        while todo:
            node, path, depth = todo.pop()
            children = node.get("children")
            kids = (
                [c for c in children.values() if isinstance(c, Mapping)]
                if isinstance(children, Mapping)
                else []
            )
            if depth >= MAX_DEPTH:
                kids = []  # too deep: the whole subtree counts here
            labels = [frame_label(kid) for kid in kids]
            own = _count(node) - sum(_count(kid) for kid in kids)
            if own > 0:
                if len(kids) == 1:
                    at = f"{path};{labels[0]}" if path else labels[0]
                else:
                    at = path or UNKNOWN_FRAME
                stacks[at] = stacks.get(at, 0) + own
            for kid, label in zip(kids, labels, strict=True):
                todo.append((kid, f"{path};{label}" if path else label, depth + 1))
    return stacks


def folded_text(stacks: Mapping[str, int], max_length: int) -> tuple[str, int]:
    """The stacks as folded text of at most ``max_length`` characters, heaviest first,
    and how many stacks were summed into the ``(other stacks)`` line to fit."""
    ordered = sorted(stacks.items(), key=lambda item: (-item[1], item[0]))
    # Room for the "(other stacks)" line, should it be needed.
    budget = max_length - len(OTHER_STACKS) - 24
    lines: list[str] = []
    used = 0
    other = folded = 0
    for stack, count in ordered:
        line = f"{stack} {count}"
        if folded or used + len(line) + 1 > budget:
            other += count
            folded += 1
            continue
        lines.append(line)
        used += len(line) + 1
    if folded:
        lines.append(f"{OTHER_STACKS} {other}")
    return "\n".join(lines), folded


def log_entry(record: ProfileRecord, max_length: int) -> LogEntry:
    """The ``dask.profile`` log record of one prefix of one workflow."""
    stacks = fold(record.trees)
    text, folded = folded_text(stacks, max_length)
    name = "/".join(record.tags)
    return LogEntry(
        time_ns=record.time_ns,
        severity_number=semconv.SEVERITY_INFO.number,
        severity_text=semconv.SEVERITY_INFO.text,
        body=text,
        attributes=(
            (semconv.DASK_SPAN_ID, record.dask_span_id),
            (semconv.DASK_SPAN_NAME, name),
            (semconv.DASK_TASK_PREFIX, record.prefix),
            (semconv.DASK_PROFILE_SAMPLES, sum(stacks.values())),
            (semconv.DASK_PROFILE_STACKS, len(stacks)),
            (semconv.DASK_PROFILE_FOLDED_STACKS, folded),
            (semconv.DASK_PROFILE_WORKERS, len(record.trees)),
        ),
        event_name=semconv.LOG_PROFILE,
        trace_id=record.trace_id,
        span_id=record.span_id,
        body_length=max_length,
    )
