"""The Perfetto trace (Chrome Trace Event JSON): valid per a schema of the format, and
readable in a viewer.

Perfetto's own importer (``perfetto.trace_processor``) downloads a native binary on first
use, which an offline machine cannot do; instead the rules that importer enforces are
asserted directly: complete events on one track nest or are disjoint, every flow start
has its finish, and both ends sit inside a slice.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from otel_spans.analysis.model import DaskSpan, Phase, TaskRun, Workflow
from otel_spans.analysis.workflow import analyse
from otel_spans.report import perfetto
from tests.support.golden import (
    GOLDEN_PATH,
    SPANS,
    W1,
    W2,
    at,
    golden_workflow,
    slow_transfer_workflow,
    task,
)
from tests.support.requirements import require_module

_NUMBER = {"type": "number", "minimum": 0}
_ID = {"type": "integer", "minimum": 0}
_COMMON = {"name": {"type": "string"}, "pid": _ID, "tid": _ID}

#: The subset of the Trace Event Format this exporter may produce, phase by phase.
TRACE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
        "traceEvents": {
            "type": "array",
            "items": {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["name", "ph", "pid", "tid", "ts", "dur"],
                        "properties": {
                            **_COMMON,
                            "ph": {"const": "X"},
                            "cat": {"type": "string"},
                            "ts": _NUMBER,
                            "dur": _NUMBER,
                            "args": {"type": "object"},
                            "cname": {"type": "string"},
                        },
                        "additionalProperties": False,
                    },
                    {
                        "type": "object",
                        "required": ["name", "cat", "ph", "id", "pid", "tid", "ts"],
                        "properties": {
                            **_COMMON,
                            "ph": {"enum": ["s", "f"]},
                            "cat": {"type": "string"},
                            "id": _ID,
                            "ts": _NUMBER,
                            "bp": {"const": "e"},
                        },
                        "additionalProperties": False,
                    },
                    {
                        "type": "object",
                        "required": ["name", "ph", "pid", "tid", "args"],
                        "properties": {
                            **_COMMON,
                            "name": {
                                "enum": [
                                    "process_name",
                                    "thread_name",
                                    "process_sort_index",
                                    "thread_sort_index",
                                ]
                            },
                            "ph": {"const": "M"},
                            "args": {
                                "type": "object",
                                "minProperties": 1,
                                "properties": {
                                    "name": {"type": "string"},
                                    "sort_index": {"type": "integer"},
                                },
                                "additionalProperties": False,
                            },
                        },
                        "additionalProperties": False,
                    },
                ]
            },
        },
    },
}


def encode(workflow: Workflow, spans: Iterable[DaskSpan] = (), **kw: Any) -> dict[str, Any]:
    trace: dict[str, Any] = json.loads(perfetto.render(workflow, analyse(workflow), spans, **kw))
    return trace


def of_phase(trace: dict[str, Any], ph: str) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == ph]


def track_names(trace: dict[str, Any]) -> dict[str, dict[int, str]]:
    """Track names by process name."""
    processes = {
        e["pid"]: e["args"]["name"] for e in of_phase(trace, "M") if e["name"] == "process_name"
    }
    tracks: dict[str, dict[int, str]] = defaultdict(dict)
    for e in of_phase(trace, "M"):
        if e["name"] == "thread_name":
            tracks[processes[e["pid"]]][e["tid"]] = e["args"]["name"]
    return tracks


def assert_tracks_nest(trace: dict[str, Any]) -> None:
    """On every track, complete events are nested or disjoint (viewers drop others)."""
    by_track: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in of_phase(trace, "X"):
        by_track[e["pid"], e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    for track, slices in by_track.items():
        open_ends: list[float] = []
        for start, end in sorted(slices, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], f"overlap on track {track}"
            open_ends.append(end)


def slice_at(trace: dict[str, Any], pid: int, tid: int, ts: float) -> dict[str, Any]:
    """The innermost complete event strictly enclosing ``ts`` on a track."""
    inside = [
        e
        for e in of_phase(trace, "X")
        if (e["pid"], e["tid"]) == (pid, tid) and e["ts"] < ts < e["ts"] + e["dur"]
    ]
    assert inside, f"no slice around {ts} on {pid}/{tid}"
    return min(inside, key=lambda e: e["dur"])


def flow_edges(trace: dict[str, Any]) -> list[tuple[str, str]]:
    """Dependency arrows as (producer key, consumer key); asserts every id is paired."""
    ends: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    for e in of_phase(trace, "s") + of_phase(trace, "f"):
        assert e["ph"] not in ends[e["id"]], f"flow id {e['id']} reused"
        ends[e["id"]][e["ph"]] = e
    edges = []
    for flow_id, pair in sorted(ends.items()):
        assert set(pair) == {"s", "f"}, f"flow {flow_id} unpaired"
        start, finish = pair["s"], pair["f"]
        assert start["name"] == finish["name"] and start["cat"] == finish["cat"]
        assert start["ts"] <= finish["ts"]
        assert finish["bp"] == "e"
        producer = slice_at(trace, start["pid"], start["tid"], start["ts"])
        consumer = slice_at(trace, finish["pid"], finish["tid"], finish["ts"])
        edges.append((producer["args"]["key"], consumer["args"]["key"]))
    return edges


def test_schema() -> None:
    jsonschema = require_module("jsonschema")
    jsonschema.validate(encode(golden_workflow(), SPANS), TRACE_SCHEMA)
    jsonschema.validate(encode(Workflow("empty", at(0), at(0))), TRACE_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        broken = encode(golden_workflow())
        broken["traceEvents"].append({"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": -1})
        jsonschema.validate(broken, TRACE_SCHEMA)


def test_one_process_per_worker_one_track_per_thread() -> None:
    trace = encode(golden_workflow(), SPANS)
    assert trace["displayTimeUnit"] == "ms"
    assert trace["otherData"]["origin_unix_ns"] == at(0)
    tracks = track_names(trace)
    assert set(tracks) == {"workflow", f"worker {W1}", f"worker {W2}"}
    assert set(tracks[f"worker {W1}"].values()) == {"thread 101", "thread 102", "transfers (1)"}
    assert set(tracks[f"worker {W2}"].values()) == {"thread 201", "transfers (1)"}
    assert set(tracks["workflow"].values()) == {"Dask spans", "critical path"}
    compute = {e["args"]["key"]: e for e in of_phase(trace, "X") if e["cat"] == "compute"}
    train = compute["train-0"]
    assert (train["ts"], train["dur"]) == (2_500_000.0, 2_000_000.0)
    assert train["name"] == "train" and train["args"]["state"] == "memory"
    (incoming,) = [e for e in of_phase(trace, "X") if e["cat"] == "transfer" and e["pid"] == 2]
    assert incoming["args"] == {"key": "train-0", "source": W2}
    assert (incoming["ts"], incoming["dur"]) == (1_900_000.0, 100_000.0)
    assert_tracks_nest(trace)


def test_span_hierarchy_nests_on_one_track() -> None:
    trace = encode(golden_workflow(), SPANS)
    spans = [e for e in of_phase(trace, "X") if e["cat"] == "span"]
    assert [e["args"]["span"] for e in spans] == [
        "pipeline",
        "pipeline / prepare",
        "pipeline / features",
        "pipeline / features / feature_a",
        "pipeline / model",
    ]
    assert {e["tid"] for e in spans} == {1}
    assert spans[3]["name"] == "feature_a"
    assert_tracks_nest(trace)


def test_overlapping_siblings_and_transfers_spread_over_tracks() -> None:
    concurrent = tuple(Phase("transfer", at(0), at(100 + 10 * i), W2) for i in range(3))
    workflow = Workflow(
        "busy",
        at(0),
        at(400),
        (
            task("a-0", W1, 1, 200, 300, transfers=concurrent),
            # Thread unknown: two tasks at once cannot share a track.
            replace(task("b-0", W1, 1, 0, 200), thread=None),
            replace(task("b-1", W1, 1, 100, 300), thread=None),
        ),
    )
    spans = [
        DaskSpan(("root",), at(0), at(400)),
        DaskSpan(("root", "x"), at(0), at(250)),
        DaskSpan(("root", "y"), at(200), at(400)),  # overlaps its sibling x
    ]
    trace = encode(workflow, spans)
    tracks = track_names(trace)
    assert sorted(tracks[f"worker {W1}"].values()) == [
        "thread 1",
        "thread unknown",
        "thread unknown (2)",
        "transfers (1)",
        "transfers (2)",
        "transfers (3)",
    ]
    assert sorted(tracks["workflow"].values()) == ["Dask spans", "Dask spans (2)", "critical path"]
    assert_tracks_nest(trace)


def test_flows_pair_along_cross_thread_dependencies() -> None:
    trace = encode(golden_workflow())
    # Every other edge stays on W1's thread 101 and gets no arrow.
    assert sorted(flow_edges(trace)) == [
        ("feature_b-0", "train-0"),
        ("feature_c-0", "train-0"),
        ("validate-0", "feature_b-0"),
        ("validate-0", "feature_c-0"),
    ]
    assert trace["otherData"]["flows_dropped"] == 0


def test_flow_cap_keeps_critical_edges_first() -> None:
    trace = encode(slow_transfer_workflow(), max_flows=2)
    assert flow_edges(trace) == [("validate-0", "feature_b-0"), ("feature_b-0", "train-0")]
    assert trace["otherData"]["flows_dropped"] == 2
    assert encode(slow_transfer_workflow(), max_flows=0)["otherData"]["flows_dropped"] == 4


def test_critical_path_marked() -> None:
    trace = encode(golden_workflow())
    compute = [e for e in of_phase(trace, "X") if e["cat"] == "compute"]
    critical_tracks = {e["tid"] for e in compute if e["pid"] == 1}
    assert len(critical_tracks) == 1
    on_path = [e for e in compute if e["pid"] == 1]
    assert tuple(e["args"]["key"] for e in on_path) == GOLDEN_PATH
    marked = [e for e in compute if e["pid"] != 1 and e["args"].get("critical")]
    assert tuple(e["args"]["key"] for e in sorted(marked, key=lambda e: e["ts"])) == GOLDEN_PATH
    assert {e["cname"] for e in marked} == {perfetto.CRITICAL_COLOR}
    unmarked = [e for e in compute if e["pid"] != 1 and not e["args"].get("critical")]
    assert {e["args"]["key"] for e in unmarked} == {"feature_b-0", "feature_c-0"}
    assert all("cname" not in e for e in unmarked)


def test_hostile_names(tmp_path: Path) -> None:
    hostile = '<script>alert("x")</script> \udcff \x00 ü'
    workflow = Workflow(
        hostile,
        at(100),
        at(300),
        (
            TaskRun(hostile, hostile, hostile, hostile, None, at(0), at(200), state="erred"),
            TaskRun("late", "late", "late", W1, 7, at(200), at(300), (hostile,)),
        ),
    )
    spans = [DaskSpan((hostile,), at(100), at(300))]
    # What the report writes: the streamed pieces, as UTF-8 (no lone surrogate left).
    path = tmp_path / "trace.json"
    path.write_bytes("".join(perfetto.stream(workflow, analyse(workflow), spans)).encode())
    trace = json.loads(path.read_text(encoding="utf-8"))
    assert trace == encode(workflow, spans)
    cleaned = '<script>alert("x")</script> \ufffd \x00 ü'
    assert trace["otherData"]["workflow"] == cleaned
    # The task started before the workflow window: times stay non-negative.
    first = min(of_phase(trace, "X"), key=lambda e: e["ts"])
    assert first["ts"] == 0.0 and first["args"]["key"] == cleaned
    assert trace["otherData"]["origin_unix_ns"] == at(0)
    assert f"worker {cleaned}" in track_names(trace)
    assert flow_edges(trace) == [(cleaned, "late")]


def test_erred_task_coloured_unless_critical() -> None:
    workflow = golden_workflow()
    tasks = tuple(
        replace(t, state="erred") if t.key in {"feature_b-0", "train-0"} else t
        for t in workflow.tasks
    )
    trace = encode(replace(workflow, tasks=tasks))
    colours = {
        e["args"]["key"]: e.get("cname")
        for e in of_phase(trace, "X")
        if e["cat"] == "compute" and e["pid"] != 1
    }
    assert colours["feature_b-0"] == perfetto.ERRED_COLOR
    assert colours["train-0"] == perfetto.CRITICAL_COLOR
    assert colours["feature_c-0"] is None


def test_negative_flow_cap_is_an_error() -> None:
    with pytest.raises(ValueError, match="max_flows"):
        encode(golden_workflow(), max_flows=-1)


def test_skewed_clocks_keep_the_critical_path_track_nested() -> None:
    # W2's clock runs 50 ms behind: b seems to start before its input a ended.
    workflow = Workflow(
        "skew",
        at(0),
        at(150),
        (task("a-0", W1, 1, 0, 100), task("b-0", W2, 1, 50, 150, ("a-0",))),
    )
    trace = encode(workflow)
    assert sorted(track_names(trace)["workflow"].values()) == [
        "critical path",
        "critical path (2)",
    ]
    assert_tracks_nest(trace)
