"""``otel-spans demo`` as a new user runs it: no warnings, no tracebacks, and a report
whose critical path runs through the stages the workflow ran one after another."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


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


def test_the_demo_runs_clean_and_its_path_goes_through_its_stages(tmp_path: Path) -> None:
    result = run_demo(tmp_path)
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert "Warning" not in err, err
    assert "Traceback (most recent call last)" not in err, err
    # the one log line of the designed failure (a corrupt record the workflow skips)
    errors = [line for line in err.splitlines() if " - ERROR - " in line]
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


def test_demo_compare_finds_and_names_the_stage_it_made_slower(tmp_path: Path) -> None:
    """Every row's verdict is the designed one: only the aggregate stage (its span, its
    ``sums`` group) and so the whole workflow got slower, every other row is the same.
    A comparison that called every row slower, or matched rows by position instead of
    name, would still find the two slower rows; it fails on the others."""
    result = run_demo(tmp_path, "--compare")
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    assert "Traceback (most recent call last)" not in result.stderr, result.stderr
    out = result.stdout
    # 8 tasks of the aggregate stage, each 0.4 s slower on 2 threads: 1.6 s more wall
    # time and 3.2 s more compute, beyond any noise threshold
    assert "workflow 'nightly training': slower" in out, out
    # rows are "  <kind:11> <name:40> <baseline> <current>  <verdict> ..."
    verdicts = {
        (line[2:13].strip(), line[14:54].strip()): line[75:85].split()[0]
        for line in out.splitlines()
        if line[2:13].strip() in ("workflow", "span", "task group") and line[2:3] != " "
    }
    slower = {
        ("workflow", "nightly training"),
        ("span", "nightly training/aggregate"),
        ("task group", "sums"),
    }
    stages = {("span", f"nightly training/{s}") for s in ("load", "features", "model")}
    assert slower | stages <= set(verdicts), out
    assert verdicts == {row: "slower" if row in slower else "same" for row in verdicts}, out
    assert (tmp_path / "otel-spans-data").is_dir()
    compare_html = list(
        tmp_path.glob("otel-spans-data/demo-*/slower/otel-spans-report/compare.html")
    )
    assert compare_html, list(tmp_path.rglob("*.html"))
