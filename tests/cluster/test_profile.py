"""Hot code (``otel-spans.profile``): Dask's statistical profile of a finished
workflow's busiest prefixes, exported as ``dask.profile`` log records and drawn as
flame graphs by the report."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from dask.delayed import delayed
from distributed import span

from otel_spans import ids, semconv
from otel_spans.config import ConfigError, Settings
from otel_spans.records import ProfileRecord
from otel_spans.report import flame
from otel_spans.telemetry import folded_stacks
from tests.support.cluster import await_until, cluster_test, stats, traced_cluster
from tests.support.report import run_report
from tests.support.tasks import nap

#: The hot stage: 4 tasks of 0.4 s each (1.6 s of compute, 160 samples at Dask's 10 ms
#: interval); the other stage only sleeps 0.1 s twice.
CRUNCH_TASKS, CRUNCH_SECONDS = 4, 0.4
#: Samples that may fall outside crunch_numbers: one at each edge of each task.
EDGE_SAMPLES = 2 * CRUNCH_TASKS


def crunch_numbers(seconds: float) -> int:
    """The hot code: it runs in this very frame (sleeping in small steps, so that the
    workers' sampler, on the event loop these in-process workers share, is not starved
    of the GIL as by a busy loop, and takes all its samples)."""
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        time.sleep(0.002)
        n += 1
    return n


def _log_records(directory: Path) -> list[dict[str, Any]]:
    out = []
    for file in directory.glob("logs-*.jsonl"):
        for line in file.read_text().splitlines():
            for rl in json.loads(line).get("resourceLogs", []):
                for sl in rl.get("scopeLogs", []):
                    out.extend(sl.get("logRecords", []))
    return out


def _attrs(record: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in record.get("attributes", []):
        value = item["value"]
        out[item["key"]] = (
            int(value["intValue"]) if "intValue" in value else value.get("stringValue")
        )
    return out


@cluster_test(120)
async def test_a_finished_workflow_exports_the_profile_of_its_busiest_prefix(
    tmp_path: Path,
) -> None:
    config = {
        "otel-spans.directory": str(tmp_path),
        "otel-spans.profile": True,
        "otel-spans.profile-prefixes": 1,
        # distributed's test configuration turns the workers' profiler off
        "distributed.worker.profile.enabled": True,
    }
    async with traced_cluster(config) as (client, scheduler, _):
        with span("nightly"):
            crunch = [
                delayed(crunch_numbers)(CRUNCH_SECONDS, dask_key_name=f"crunch-{i}")
                for i in range(CRUNCH_TASKS)
            ]
            naps = [delayed(nap)(0.1, dask_key_name=f"nap-{i}") for i in range(2)]
            results = await client.gather(client.compute(crunch + naps))
        assert len(results) == CRUNCH_TASKS + 2

        async def exported() -> bool:
            counts = (await stats(client)).get("profiles", {})
            return counts.get("exported", 0) >= 1 and counts.get("waiting", 1) == 0

        await await_until(exported, timeout=30, message="no profile was exported")
        counts = (await stats(client))["profiles"]
        assert counts == {"exported": 1, "failed": 0, "dropped": 0, "waiting": 0}
        ext = scheduler.extensions["spans"]
        root = next(s for s in ext.spans.values() if s.name == ("nightly",))

    records = [r for r in _log_records(tmp_path) if r.get("eventName") == semconv.LOG_PROFILE]
    assert len(records) == 1, records
    record = records[0]
    attrs = _attrs(record)
    # the busiest prefix only (profile-prefixes: 1), linked to the root's trace
    assert attrs[semconv.DASK_TASK_PREFIX] == "crunch"
    assert attrs[semconv.DASK_SPAN_ID] == root.id
    assert attrs[semconv.DASK_SPAN_NAME] == "nightly"
    assert attrs[semconv.DASK_PROFILE_WORKERS] == 2
    assert attrs[semconv.DASK_PROFILE_FOLDED_STACKS] == 0
    assert record["traceId"] == f"{ids.workflow_trace_id(root.id):032x}"
    assert record["spanId"] == f"{ids.dask_span_id(root.id):016x}"
    # 1.6 s of compute sampled every 10 ms: at most 160 samples (a few more at the
    # edges), and at least half even on a loaded machine
    samples = attrs[semconv.DASK_PROFILE_SAMPLES]
    ideal = CRUNCH_TASKS * CRUNCH_SECONDS / 0.01
    assert ideal / 2 <= samples <= ideal * 1.2, samples
    body = record["body"]["stringValue"]
    tree = flame.parse(body)
    assert tree.total == samples
    # The design puts every sample in crunch_numbers itself (time.sleep and
    # perf_counter are C calls: no frame of their own). The only samples allowed
    # elsewhere are one at each edge of each task, taken while the thread runs Dask's
    # code around the call. Catches: samples of the prefix folded onto a caller (Dask
    # counts a sample on every frame above the running one), or merged with the other
    # prefix's, or the tree of one worker only.
    hottest_name, hottest_samples = flame.hottest(tree, 1)[0]
    assert hottest_name.startswith("crunch_numbers (") and "test_profile.py" in hottest_name
    assert hottest_samples >= samples - EDGE_SAMPLES, (hottest_samples, samples, body)

    result = run_report(str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "hot code" in result.stdout
    assert "    crunch: crunch_numbers (" in result.stdout, result.stdout
    page = (tmp_path / "otel-spans-report" / "nightly.html").read_text()
    assert "<h2>Hot code</h2>" in page and 'class="flame"' in page
    assert "crunch_numbers (" in page


@cluster_test(60)
async def test_profiles_are_off_by_default(tmp_path: Path) -> None:
    async with traced_cluster({"otel-spans.directory": str(tmp_path)}) as (client, _, _):
        with span("nightly"):
            work = [delayed(crunch_numbers)(0.05, dask_key_name=f"crunch-{i}") for i in range(2)]
            await client.gather(client.compute(work))
        await await_until(lambda: list(tmp_path.glob("traces-*.jsonl")), timeout=15)
        assert "profiles" not in await stats(client)
    assert not [r for r in _log_records(tmp_path) if r.get("eventName") == semconv.LOG_PROFILE]


def _node(name: str, count: int, *children: dict[str, Any], line: int = 1) -> dict[str, Any]:
    identifier = f"{name};/env/lib/python3.11/site-packages/pkg/{name}.py;{line}"
    return {
        "identifier": identifier,
        "count": count,
        "description": {"name": name, "filename": "ignored", "line_number": 99, "line": ""},
        "children": {c["identifier"]: c for c in children},
    }


def _root(count: int, *children: dict[str, Any]) -> dict[str, Any]:
    return {
        "identifier": "root",
        "count": count,
        "description": {},
        "children": {c["identifier"]: c for c in children},
    }


def test_fold_puts_samples_on_the_frame_that_ran_where_dask_says_which() -> None:
    # Dask counts a sample on the frames above the running one: 7 samples in hot and 1
    # in main itself on worker a; 5 in hot and 2 in warm on worker b
    worker_a = _root(8, _node("main", 7, _node("hot", 0)))
    worker_b = _root(7, _node("main", 7, _node("hot", 0), _node("warm", 0)))
    main = "main (pkg/main.py:1)"
    assert folded_stacks.fold([worker_a, worker_b]) == {
        f"{main};hot (pkg/hot.py:1)": 7,  # one callee: exact
        main: 1 + 7,  # main itself, and b's two callees, which cannot be told apart
    }


def test_fold_skips_what_is_malformed() -> None:
    bad_child = {"identifier": "x", "count": "many", "children": "none"}
    tree = _root(3, _node("main", 3), bad_child)
    assert folded_stacks.fold([tree, None, "text", {"children": 5}]) == {"main (pkg/main.py:1)": 3}


def test_folded_text_sums_what_does_not_fit_and_counts_it() -> None:
    stacks = {f"frame{i:03d};leaf": 1000 - i for i in range(200)}
    text, folded = folded_stacks.folded_text(stacks, 1024)
    assert len(text) <= 1024
    lines = text.splitlines()
    assert lines[0] == "frame000;leaf 1000"  # heaviest first
    assert lines[-1].startswith(folded_stacks.OTHER_STACKS + " ")
    kept = len(lines) - 1
    assert folded == 200 - kept > 0
    # nothing is lost: every sample is in a line
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == sum(stacks.values())


def test_the_log_entry_carries_the_whole_budget() -> None:
    tree = _root(4, _node("main", 4, _node("work", 0)))
    record = ProfileRecord(1, 2, 3, "uuid", ("nightly",), "crunch", (tree,))
    entry = folded_stacks.log_entry(record, 65536)
    assert entry.body == "main (pkg/main.py:1);work (pkg/work.py:1) 4"
    assert entry.body_length == 65536 and entry.event_name == semconv.LOG_PROFILE
    assert dict(entry.attributes)[semconv.DASK_PROFILE_SAMPLES] == 4


def test_flame_graph_widths_follow_the_samples() -> None:
    root = flame.parse("a;b 3\na;c 1\na 1\nbad line\n")
    assert root.total == 5
    a = root.children["a"]
    assert (a.total, a.own, a.children["b"].total) == (5, 1, 3)
    svg = flame.svg(root)
    # "all" spans the width; b is 3/5 of it
    assert 'width="1100.0"' in svg and 'width="660.0"' in svg


@pytest.mark.parametrize(
    ("key", "value"),
    [("profile", "yes"), ("profile-prefixes", 0), ("profile-max-length", 100)],
)
def test_bad_profile_settings_name_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        Settings.from_config({key: value})
