"""The report's memory section: evidence from the spans' memory attributes, drawn as
text, HTML and JSON (spans built by hand: each value is the design's)."""

from __future__ import annotations

import dataclasses
import json

from otel_spans import semconv
from otel_spans.report import memory
from otel_spans.report.load import LoadedSpan

MIB = 2**20


def dask_span(span_id: str, tags: list[str], end_ns: int, **values: object) -> LoadedSpan:
    attrs: dict[str, object] = {
        semconv.DASK_SPAN_ID: f"uuid-{tags[-1]}",
        semconv.DASK_SPAN_TAGS: tags,
        **{f"dask.span.memory.{k}": v for k, v in values.items()},
    }
    return LoadedSpan("t", span_id, "", tags[-1], 0, end_ns, attrs)


def test_evidence_names_the_stage_and_group_that_held_the_most() -> None:
    lost = {
        semconv.DASK_WORKER_ADDRESS: "tcp://w:1",
        semconv.DASK_WORKER_LOST_TASKS: ["big-3"],
        semconv.DASK_WORKER_LOST_GROUPS: ["big"],
        semconv.DASK_WORKER_LOST_KILLED_TASKS: ["big-3"],
        semconv.DASK_WORKER_LOST_PROCESS_MEMORY: 990 * MIB,
        semconv.DASK_WORKER_LOST_MEMORY_LIMIT: 1024 * MIB,
    }
    spans = [
        dask_span("01", ["wf"], 10, peak=0, held=0, spilled=0, tree_peak=40 * MIB),
        dask_span("02", ["wf", "small"], 5, peak=MIB, held=MIB, spilled=0),
        # two exports of "big": the continuation carries the totals so far
        dask_span("03", ["wf", "big"], 6, peak=30 * MIB, held=30 * MIB, spilled=8 * MIB),
        dask_span("04", ["wf", "big"], 9, peak=39 * MIB, held=2 * MIB, spilled=12 * MIB),
    ]
    spans[3] = dataclasses.replace(spans[3], events=(("dask.worker.lost", 8, lost),))
    group = LoadedSpan(
        "t",
        "g1",
        "03",
        "big",
        0,
        6,
        {
            semconv.DASK_TASK_GROUP_NAME: "big-<b>",
            semconv.DASK_TASK_GROUP_MEMORY_PEAK: 39 * MIB,
            semconv.DASK_TASK_GROUP_MEMORY_SPILLED: 12 * MIB,
            semconv.DASK_TASK_GROUP_MEMORY_PAUSES: 2,
            semconv.DASK_TASK_GROUP_MEMORY_PAUSE_DURATION: 1.5,
        },
    )
    found = memory.evidence(spans, [group])
    assert found is not None
    assert found.tree_peak == 40 * MIB
    top = found.spans[0]
    assert (top.span, top.peak, top.held, top.spilled) == ("wf/big", 39 * MIB, 2 * MIB, 12 * MIB)
    assert [r.span for r in found.spans] == ["wf/big", "wf/small", "wf"]
    (g,) = found.groups
    assert (g.span, g.group, g.pauses, g.pause_seconds) == ("wf/big", "big-<b>", 2, 1.5)
    (w,) = found.lost_workers
    assert (w.span, w.killed_tasks, w.memory_limit) == ("wf/big", ("big-3",), 1024 * MIB)

    text = "\n".join(memory.text_lines(found))
    assert "40 MiB of results held at most, 12 MiB spilled, 0 worker pause(s), 1 worker(s)" in text
    assert "KilledWorker: big-3" in text
    page = memory.section(found)
    assert "big-&lt;b&gt;" in page and "big-<b>" not in page
    as_json = json.loads(json.dumps(memory.as_json(found)))
    assert as_json["spans"][0]["spilled_bytes"] == 12 * MIB
    assert as_json["groups"][0]["pauses"] == 2
    assert as_json["lost_workers"][0]["killed_tasks"] == ["big-3"]


def test_no_evidence_without_memory_attributes() -> None:
    old = LoadedSpan("t", "01", "", "wf", 0, 1, {semconv.DASK_SPAN_ID: "u"})
    assert memory.evidence([old], []) is None
    assert memory.text_lines(None) == [] and memory.section(None) == ""
    assert memory.as_json(None) is None
