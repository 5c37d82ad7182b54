"""``otel-spans report``: real runs, scale, and malformed input that names file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dask.sizeof import sizeof
from distributed import span

from benchmarks.synthetic_trace import write as write_synthetic
from otel_spans.report.load import load_spans
from tests.support.cluster import cluster_test, traced_cluster
from tests.support.fresh_python import fresh_python
from tests.support.golden import golden_graph
from tests.support.report import run_report
from tests.support.tasks import inc


@cluster_test(90)
async def test_report_on_a_real_run_finds_the_golden_critical_path(tmp_path: Path) -> None:
    config = {
        "otel-spans.directory": str(tmp_path),
        "otel-spans.traces.tasks.mode": "all",
        "otel-spans.metrics.interval": "200ms",
    }
    # one worker, 3 threads: side by side, and no result travels (a transfer that ends
    # after the slowest feature would rightly put its producer on the path)
    async with traced_cluster(config, n_workers=1, nthreads=3) as (client, _, _):
        with span("golden"):
            assert await client.compute(golden_graph()) == 0.05
    # the scheduler closed: every span and the last metrics are in the files
    result = run_report(str(tmp_path), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "workflow 'golden'" in out
    assert "tasks analysed" in out
    path = [line.split("→ ")[1].split()[0] for line in out.splitlines() if "→ " in line]
    # from the design: the slowest feature (1.0 s, 0.5 s ahead of the next) is on it
    assert path == ["fetch-0", "validate-0", "feature_a-0", "train-0", "evaluate-0", "deploy-0"]
    assert "worker time by activity" in out
    trace = json.loads((tmp_path / "out" / "golden.perfetto.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"feature_a-0", "train-0"} <= names or any("feature_a" in str(n) for n in names)
    html = (tmp_path / "out" / "golden.html").read_text()
    assert "golden" in html and "feature_a" in html


@cluster_test(90)
async def test_counts_are_the_exported_totals_when_task_spans_are_sampled(tmp_path: Path) -> None:
    """2 groups of 16 tasks, 5 task spans kept per group: every count says 16 and 32."""
    config = {"otel-spans.directory": str(tmp_path), "otel-spans.traces.tasks.slowest": 5}
    async with traced_cluster(config) as (client, _, _):
        with span("sampled"):
            for prefix in ("alpha", "beta"):
                keys = [f"{prefix}-{i}" for i in range(16)]
                assert await client.gather(client.map(inc, range(16), key=keys)) == list(
                    range(1, 17)
                )
    result = run_report(str(tmp_path), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "32 tasks (2 task groups analysed)" in out, out
    bottlenecks = [line for line in out.splitlines() if line.strip().startswith(("alpha", "beta"))]
    assert len(bottlenecks) == 2 and all("(16 tasks," in line for line in bottlenecks), out
    html = (tmp_path / "out" / "sampled.html").read_text()
    assert "32 tasks" in html
    assert html.count("16 tasks") >= 2  # each group's row
    assert "1 task ·" not in html and ": 1 tasks," not in html  # a group labelled as one task
    # the critical path's steps are groups: beta depends on nothing, but the client
    # submitted it once alpha's results were back, so the path runs through both
    assert "<p>2 task groups, " in html
    # memory: each group's 16 results (small ints, as Dask sizes them) held at once
    assert '<section id="memory">' in html
    memory = json.loads((tmp_path / "out" / "sampled.memory.json").read_text())
    peaks = {g["group"]: g["peak_bytes"] for g in memory["groups"]}
    assert peaks == {"alpha": 16 * sizeof(1), "beta": 16 * sizeof(1)}, memory
    trace = json.loads((tmp_path / "out" / "sampled.perfetto.json").read_text())
    counts = {
        e["args"]["prefix"]: e["args"].get("tasks")
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and "prefix" in e.get("args", {})
    }
    assert counts == {"alpha": 16, "beta": 16}


def test_report_scales_to_100k_spans_within_a_memory_bound(tmp_path: Path) -> None:
    """100k spans: about 5 s and 215 MB peak RSS here; bound: 400 MB.

    docs/performance.md has the 1M-span figures.
    """
    file = tmp_path / "big.jsonl"
    assert write_synthetic(file, 50_000) == 100_051
    # The report's own peak RSS, measured inside its process (RUSAGE_CHILDREN would
    # be the largest child this test session ever had).
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from otel_spans.report.cli import report\n"
        f"code = report(Path({str(file)!r}), Path({str(tmp_path / 'out')!r}),"
        " stdout=sys.stdout, stderr=sys.stderr)\n"
        # VmHWM is this process's own peak; ru_maxrss keeps the parent's across exec
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
        "print('peak_kib', hwm.split()[1])\n"
        "sys.exit(code)\n"
    )
    result = fresh_python(script)
    assert "50 tasks, " in result.stdout  # one task per layer on the path
    peak_kib = int(result.stdout.rsplit("peak_kib", 1)[1])
    assert peak_kib < 400 * 1024


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"resourceSpans": []}\n{"resourceSpans": [', r"bad.jsonl:2: not JSON"),
        ("[1, 2]\n", r"bad.jsonl:1: not an OTLP/JSON request"),
        (
            '{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "x"}]}]}]}\n',
            r"bad.jsonl:1: not an OTLP/JSON trace request \(bad field 'traceId'\)",
        ),
        (
            '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "a", "spanId": "b",'
            ' "name": "x", "startTimeUnixNano": "soon", "endTimeUnixNano": "1"}]}]}]}\n',
            r"bad.jsonl:1: not an OTLP/JSON trace request",
        ),
    ],
)
def test_malformed_input_names_file_and_line(tmp_path: Path, content: str, expected: str) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    result = run_report(str(bad))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert __import__("re").search(expected, result.stderr), result.stderr


def test_missing_path_and_empty_input(tmp_path: Path) -> None:
    result = run_report(str(tmp_path / "nope"))
    assert result.returncode == 2
    assert "no such file or directory" in result.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    result = run_report(str(empty))
    assert result.returncode == 1
    assert "no Dask spans" in result.stderr


def boom() -> None:
    raise ValueError("designed failure")


@cluster_test(90)
async def test_lookup_of_one_task_or_group_and_the_numbers_of_the_summary(
    tmp_path: Path,
) -> None:
    """8 alpha tasks (tuple keys), 8 beta tasks on them, one task that fails; 3 task
    runs kept per group. The summary counts by state and shares of wall time; --key and
    --group print what the trace holds for one task and one group."""
    config = {
        "otel-spans.directory": str(tmp_path),
        "otel-spans.traces.tasks.slowest": 3,
        # the default: worker metrics (with heartbeats, the first one 1 s after a worker
        # starts) land before the root's export
        "otel-spans.traces.linger": "2s",
    }
    async with traced_cluster(config) as (client, _, _):
        with span("lookup"):
            alpha = client.map(inc, range(8), key=[("alpha", i) for i in range(8)])
            beta = client.map(inc, alpha, key=[f"beta-{i}" for i in range(8)])
            assert await client.gather(beta) == list(range(2, 10))
            failed = client.submit(boom, key="boom-0")
            with pytest.raises(ValueError, match="designed failure"):
                await failed
    out_dir = str(tmp_path / "out")
    summary = run_report(str(tmp_path), "-o", out_dir)
    assert summary.returncode == 0, summary.stderr
    assert "tasks by state: 1 erred, 16 memory" in summary.stdout, summary.stdout
    assert "parallel efficiency 0.0%" not in summary.stdout
    assert "of the critical path | of wall time" in summary.stdout
    assert "task groups, " in summary.stdout  # the path's nodes, named as what they are

    failure = run_report(str(tmp_path), "--key", "boom-0")
    assert failure.returncode == 0, failure.stderr
    assert "task 'boom' in Dask span 'lookup'" in failure.stdout, failure.stdout
    assert "status ERROR" in failure.stdout and "ValueError" in failure.stdout
    assert "dask.worker.address = tcp://127.0.0.1:" in failure.stdout

    kept = {
        str(s.attributes["dask.task.key"])
        for s in load_spans(tmp_path)
        if str(s.attributes.get("dask.task.key", "")).startswith("('alpha'")
    }
    assert len(kept) == 3, kept  # the design: 3 of 8 kept
    shown = run_report(str(tmp_path), "--key", sorted(kept)[0])
    assert shown.returncode == 0, shown.stderr
    assert f"dask.task.key = {sorted(kept)[0]}" in shown.stdout
    assert "task group alpha" in shown.stdout
    (dropped, *_) = sorted({str(("alpha", i)) for i in range(8)} - kept)
    missing = run_report(str(tmp_path), "--key", dropped)
    assert missing.returncode == 1
    assert "task runs are sampled: try --group" in missing.stderr

    group = run_report(str(tmp_path), "--group", "beta")
    assert group.returncode == 0, group.stderr
    assert "dask.task_group.task_count = 8" in group.stdout, group.stdout
    assert "depends on alpha" in group.stdout
    assert "3 task runs in the trace (slowest first)" in group.stdout
