"""``otel-spans demo`` as a new user runs it: no warnings, no tracebacks, and a report
whose critical path runs through the stages the workflow ran one after another."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from otel_spans.demo import SLOWER_BY, SLOWER_STAGE, WORKFLOW
from otel_spans.report import compare, history
from otel_spans.report.build import build_workflows
from otel_spans.report.history_cli import judge_runs
from otel_spans.report.load import load_spans
from otel_spans.report.runs import find_runs
from tests.support.report import run_report

#: The aggregate stage's designed slowdown in wall time: its 8 ``sums`` tasks each
#: ``SLOWER_BY`` seconds slower, on 2 worker threads (and 2 x that in compute time).
AGGREGATE_SLOWER_S = 8 * SLOWER_BY / 2


def run_demo(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``otel-spans demo`` as a new user runs it: no OTel or Dask settings of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "DASK_"))}
    return subprocess.run(
        [sys.executable, "-m", "otel_spans", "demo", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )


#: The first line of a logged record (``2026-11-28 10:23:52,548 - distributed...``): a
#: traceback printed in the log ends where the next record begins.
_LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", re.MULTILINE)


#: The record Dask logs when a worker's heartbeat meets the scheduler already closing.
_DASK_HEARTBEAT_AT_SHUTDOWN = (
    "distributed.worker - ERROR - Failed to communicate with scheduler during heartbeat."
)


def our_tracebacks(stderr: str) -> list[str]:
    """The logged tracebacks that pass through otel-spans' code. Dask itself logs one
    when a worker's heartbeat meets the scheduler already closing, which a loaded
    machine makes likely at the demo's shutdown; that one is not ours to fail on, nor is
    the log record after it (the demo's designed failure names ``otel_spans/demo.py``)."""
    blocks = stderr.split("Traceback (most recent call last)")[1:]
    return [b for b in (_LOG_RECORD.split(b, maxsplit=1)[0] for b in blocks) if "/otel_spans/" in b]


def error_records(stderr: str) -> list[str]:
    """The ERROR records' first lines, but for Dask's heartbeat at shutdown."""
    return [
        line
        for line in stderr.splitlines()
        if " - ERROR - " in line and not line.endswith(_DASK_HEARTBEAT_AT_SHUTDOWN)
    ]


def test_a_dask_traceback_is_not_ours_even_before_a_record_naming_our_code() -> None:
    """Catches: a traceback block that runs on into the next log record (a loaded run
    failed so: Dask's heartbeat traceback, then the demo's designed "Compute Failed"
    record, which names otel_spans/demo.py), a check that finds nothing at all, and an
    ERROR count that fails on Dask's heartbeat record at shutdown (a loaded CI run did)."""
    dask_heartbeat = (
        "2026-11-28 10:23:52,100 - distributed.worker - ERROR - Failed to heartbeat\n"
        "Traceback (most recent call last):\n"
        '  File "/venv/site-packages/distributed/worker.py", line 1165, in heartbeat\n'
        "distributed.comm.core.CommClosedError: Stream is closed\n"
    )
    designed_failure = (
        "2026-11-28 10:23:52,548 - distributed.worker - ERROR - Compute Failed\n"
        "Traceback: '  File \"/work/otel_spans/demo.py\", line 34, in _fragile\\n'\n"
    )
    ours = (
        "2026-11-28 10:23:53,001 - otel_spans - ERROR - poll failed\n"
        "Traceback (most recent call last):\n"
        '  File "/work/otel_spans/scheduler/tracking.py", line 300, in poll\n'
        "KeyError: 'x'\n"
    )
    assert our_tracebacks(dask_heartbeat + designed_failure) == []
    at_shutdown = f"2026-11-28 10:23:54,002 - {_DASK_HEARTBEAT_AT_SHUTDOWN}\n"
    (designed,) = error_records(designed_failure + at_shutdown)
    assert designed.endswith("Compute Failed")
    assert len(error_records(designed_failure + at_shutdown + ours)) == 2
    (found,) = our_tracebacks(dask_heartbeat + designed_failure + ours)
    assert "tracking.py" in found and "demo.py" not in found


def test_the_demo_runs_clean_and_its_path_goes_through_its_stages(tmp_path: Path) -> None:
    result = run_demo(tmp_path)
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert "Warning" not in err, err
    assert not our_tracebacks(err), err
    # the one log line of the designed failure (a corrupt record the workflow skips),
    # besides Dask's own heartbeat record when the shutdown meets it (see above)
    errors = error_records(err)
    assert errors == [errors[0]] and "Compute Failed" in errors[0], err
    assert "record 3 is corrupt" in err
    out = result.stdout
    assert "tasks by state: 1 erred, " in out, out
    # the path: the arrays of load and features, then aggregate's and model's tasks,
    # which depend on nothing before them but the client's waiting for results
    path = [line.split("→ ", 1)[1] for line in out.splitlines() if "→ " in line]
    assert any(step.startswith("('random-") for step in path), path
    stages = [re.sub(r"[-(].*", "", step.lstrip("('")) for step in path]
    # aggregate's tasks take a millisecond each: the path enters that stage through a
    # _sums or, when the submission was later than every _sums, at _means directly
    aggregate = min(i for i, stage in enumerate(stages) if stage in ("_sums", "_means"))
    assert aggregate < stages.index("_slow") < stages.index("_fragile"), stages
    assert "on the client between a result and the next submission" in out
    # the README's next command, on the parent of the demo's run directory
    again = run_report(str(tmp_path / "otel-spans-data"))
    assert again.returncode == 0, again.stderr
    # one report of the one workflow: one header line (findings may name it too)
    headers = re.findall(rf"^workflow '{re.escape(WORKFLOW)}'  \(trace ", again.stdout, re.M)
    assert len(headers) == 1, again.stdout
    # every stage's results held at once, as the report's memory section says
    assert re.search(r"  memory: [0-9.]+ [KMG]?i?B of results held at most", out), out


def test_demo_compare_finds_and_names_the_stage_it_made_slower(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every row's verdict is the designed one: only the aggregate stage (its span, its
    ``sums`` group) and so the whole workflow got slower, every other row is the same.
    A comparison that called every row slower, or matched rows by position instead of
    name, would still find the two slower rows; it fails on the others.

    The rows are compared again from the two runs' files with a noise threshold
    derived from the design (half the aggregate span's designed change): with the
    report's 0.1 s, a busy moment on a shared machine turns a same row (the
    partitions' 0.1 s of compute) slower. The load and features spans' wall times are
    not the design's: a few milliseconds of tasks inside the client's graph building
    and the workers' first numpy and pandas imports, which a busy 2-core machine
    stretched by 2.8 s in one run with their tasks unchanged. Their rows must be
    there, matched by name; their verdict is not asserted.
    """
    result = run_demo(tmp_path, "--compare")
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    assert not our_tracebacks(result.stderr), result.stderr
    assert f"workflow '{WORKFLOW}': slower" in result.stdout, result.stdout
    (run_dir,) = tmp_path.glob("otel-spans-data/demo-*")
    assert (run_dir / "slower" / "otel-spans-report" / "compare.html").is_file()

    monkeypatch.setattr(compare, "NOISE_SECONDS", AGGREGATE_SLOWER_S / 2)
    (comparison,) = compare.compare(
        build_workflows(load_spans(run_dir / "baseline")),
        build_workflows(load_spans(run_dir / "slower")),
        WORKFLOW,
    )
    verdicts = {(row.kind, row.name): row.verdict for row in comparison.rows}
    slower = {
        ("workflow", WORKFLOW),
        ("span", f"{WORKFLOW}/{SLOWER_STAGE}"),
        ("task group", "sums"),
    }
    undesigned = {("span", f"{WORKFLOW}/load"), ("span", f"{WORKFLOW}/features")}
    # the demo's own functions' groups (_partition, _sums, ...) and the model span
    own = {("task group", p) for p in ("partition", "sums", "means", "slow", "fragile")}
    assert slower | undesigned | own | {("span", f"{WORKFLOW}/model")} <= set(verdicts)
    designed = {row: verdict for row, verdict in verdicts.items() if row not in undesigned}
    assert designed == {row: "slower" if row in slower else "same" for row in designed}


def test_demo_history_names_the_stage_it_made_slower(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six demo runs, each in a process and cluster of its own, the last with the
    aggregate stage slowed: judged on the five before it, the aggregate span and its
    ``sums`` group regressed, every other row within noise but the load and features
    spans' and so the workflow's, whose wall times are not the design's (see the
    comparison test above). As there, the rows are judged again from the files with a
    least spread derived from the design: an eighth of the aggregate span's designed
    change, so the change is 8 spreads and an unchanged row must move by 3.5."""
    result = run_demo(tmp_path, "--history", "6")
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    assert not our_tracebacks(result.stderr), result.stderr
    out = result.stdout
    assert "found 5 past runs:" in out, out
    (regressed,) = [line for line in out.splitlines() if " — REGRESSED: " in line]
    assert f"span '{WORKFLOW}/{SLOWER_STAGE}'" in regressed and "task group 'sums'" in regressed
    (run_dir,) = tmp_path.glob("otel-spans-data/demo-*")
    assert (run_dir / "run-06" / "otel-spans-report" / "history.html").is_file()

    monkeypatch.setattr(history, "SECONDS_FLOOR", AGGREGATE_SLOWER_S / 8)
    (judged,) = judge_runs(find_runs(run_dir)[:-1], find_runs(run_dir)[-1], WORKFLOW, None)
    verdicts = {(row.kind, row.name): row.speed.verdict for row in judged.rows}
    slower = {("span", f"{WORKFLOW}/{SLOWER_STAGE}"), ("task group", "sums")}
    # the whole workflow's wall time holds the load and features spans': on a busy
    # machine its past runs spread so wide that the designed 1.6 s is within them
    undesigned = {
        ("workflow", WORKFLOW),
        ("span", f"{WORKFLOW}/load"),
        ("span", f"{WORKFLOW}/features"),
    }
    own = {("task group", p) for p in ("partition", "sums", "means", "slow", "fragile")}
    assert slower | undesigned | own | {("span", f"{WORKFLOW}/model")} <= set(verdicts)
    designed = {row: verdict for row, verdict in verdicts.items() if row not in undesigned}
    assert designed == {row: "regressed" if row in slower else "within noise" for row in designed}
