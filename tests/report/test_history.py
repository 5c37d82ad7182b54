"""``otel-spans report --history``: designed histories judged, and runs found where
they are.

The histories are 20 runs of a workflow whose task groups' compute times are drawn
from a known noise distribution (tests/support/history_runs.py: normal, 10 % of the
mean, clipped at ±3 of it). The run judged has every group at its distribution's mean
(so an unchanged row lies well inside the band by design, whatever the draws) but for
the designed change: one group slowed by a designed factor, slowed within the noise,
or a new group.
"""

from __future__ import annotations

import io
import json
import random
import statistics
from pathlib import Path

import pytest

from otel_spans.report import history as history_module
from otel_spans.report import history_html, robust
from otel_spans.report.cli import report
from otel_spans.report.compare_cli import compare as compare_command
from otel_spans.report.history import history
from otel_spans.report.history_cli import history_command
from otel_spans.report.numbers import Numbers
from otel_spans.report.runs import find_runs
from tests.report.test_compare import run_stages
from tests.support.cluster import cluster_test
from tests.support.history_runs import (
    NOISE,
    STAGES,
    TASKS,
    WORKFLOW,
    noise,
    write_history,
    write_history_run,
)
from tests.support.html import HOSTILE, HOSTILE_SHOWN, parse
from tests.support.report import run_report

PAST = 20
SEED = 36
#: The designed slowdown of the slowed group: its lowest possible value (the noise
#: clipped at -30 %) is still 1.4x the mean, 4 spreads of 10 % above.
SLOWED_BY = 2.0


def judged(
    tmp_path: Path, **designed: object
) -> tuple[int, dict[tuple[str, str], dict[str, object]], str]:
    """20 past runs, then the designed one (noise-free but for ``designed``): the exit
    code under --fail-if-regressed, the JSON rows by (kind, name), the text."""
    write_history(tmp_path / "runs", PAST, SEED)
    write_history_run(tmp_path / "runs" / "tonight", PAST, None, **designed)  # type: ignore[arg-type]
    out, err = io.StringIO(), io.StringIO()
    code = history_command(
        [tmp_path / "runs"],
        json_out=tmp_path / "history.json",
        fail_if_regressed=True,
        stdout=out,
        stderr=err,
    )
    assert "Traceback" not in err.getvalue()
    (workflow,) = json.loads((tmp_path / "history.json").read_text())["workflows"]
    assert workflow["workflow"] == WORKFLOW
    assert len(workflow["past_runs"]) == PAST
    rows = {(r["kind"], r["name"]): r for r in workflow["rows"]}
    return code, rows, out.getvalue()


def verdicts(rows: dict[tuple[str, str], dict[str, object]], metric: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for (kind, name), row in rows.items():
        out.setdefault(row[metric]["verdict"], set()).add(f"{kind} {name}")  # type: ignore[index]
    return out


ALL_ROWS = (
    {f"workflow {WORKFLOW}"}
    | {f"span {WORKFLOW}/{stage}" for stage in STAGES}
    | {f"task group {group}" for groups in STAGES.values() for group in groups}
)


def test_one_slowed_group_is_regressed_and_nothing_else(tmp_path: Path) -> None:
    """``clean`` (6 s of the transform stage's 8 s) twice as slow: the group, its stage
    and the workflow's wall time and cost regressed; every other row within noise."""
    code, rows, text = judged(tmp_path, slower={"clean": SLOWED_BY})
    moved = {"task group clean", f"span {WORKFLOW}/transform", f"workflow {WORKFLOW}"}
    for metric in ("speed", "cost"):
        assert verdicts(rows, metric) == {
            "regressed": moved,
            "within noise": ALL_ROWS - moved,
        }, metric
    clean = rows[("task group", "clean")]["speed"]
    assert isinstance(clean, dict)
    # the designed numbers: median about 6 s, spread at least the 10 % floor
    assert 6.0 * (1 - NOISE) < clean["median"] < 6.0 * (1 + NOISE)
    assert clean["scale"] >= robust.RELATIVE_FLOOR * clean["median"]
    assert clean["current"] == pytest.approx(6.0 * SLOWED_BY)
    assert clean["z"] > robust.THRESHOLD
    # beyond every past run: the best a rank statement over 20 runs can say
    assert clean["as_far"] == 0 and clean["p"] == pytest.approx(1 / (PAST + 1))
    assert code == 3  # --fail-if-regressed
    # the numbers not judged, summarised alike: 8 tasks of 8,000 bytes in every run
    assert rows[("task group", "join")]["distributions"] == {
        "tasks": {"n": PAST, "median": TASKS, "mad": 0.0, "low": TASKS, "high": TASKS},
        "nbytes": {"n": PAST, "median": 8_000 * TASKS, "mad": 0.0, "low": 8_000 * TASKS,
                   "high": 8_000 * TASKS},
        "erred": {"n": PAST, "median": 0.0, "mad": 0.0, "low": 0.0, "high": 0.0},
        "transfer_s": {"n": PAST, "median": 0.0, "mad": 0.0, "low": 0.0, "high": 0.0},
    }  # fmt: skip
    assert "REGRESSED: workflow 'nightly', span 'nightly/transform', task group 'clean'" in text
    assert "shape (new or gone rows, task counts, erred tasks)\n    unchanged" in text


def test_a_run_slowed_within_the_noise_is_not_flagged(tmp_path: Path) -> None:
    """``clean`` 1 noise deviation (10 %) slower: z about 1, within noise, exit 0."""
    code, rows, text = judged(tmp_path, slower={"clean": 1 + NOISE})
    assert verdicts(rows, "speed") == {"within noise": ALL_ROWS}
    assert verdicts(rows, "cost") == {"within noise": ALL_ROWS}
    z = rows[("task group", "clean")]["speed"]["z"]  # type: ignore[index]
    assert 0 < z < robust.THRESHOLD
    assert code == 0
    assert "nothing regressed" in text
    # the workflow row, then the others counted: the text names only what moved
    assert text.count(f"… {len(ALL_ROWS) - 1} more rows within noise (--all-rows") == 2


def test_a_new_group_and_a_changed_task_count_are_shape_changes(tmp_path: Path) -> None:
    """A 4 ms group added to publish (its wall time grows by 1 ms: no speed change),
    and join given twice its tasks at the same compute time: shape, not speed."""
    code, rows, text = judged(
        tmp_path, extra={"audit": ("publish", 0.004)}, tasks={"join": 2 * TASKS}
    )
    assert verdicts(rows, "speed") == {"new": {"task group audit"}, "within noise": ALL_ROWS}
    assert code == 0
    shapes = {key: row["shape"] for key, row in rows.items() if row["shape"]}
    assert shapes == {
        ("task group", "audit"): [f"new: in none of the {PAST} past runs"],
        ("task group", "join"): [f"{2 * TASKS} tasks, past runs {TASKS}"],
        ("span", f"{WORKFLOW}/transform"): [f"{3 * TASKS} tasks, past runs {2 * TASKS}"],
        ("span", f"{WORKFLOW}/publish"): [f"{2 * TASKS} tasks, past runs {TASKS}"],
        ("workflow", WORKFLOW): [f"{6 * TASKS} tasks, past runs {4 * TASKS}"],
    }
    assert "task group  audit" in text and "new: in none of the 20 past runs" in text


def test_a_group_that_is_gone() -> None:
    past = [("r", {("task group", "x"): Numbers(1.0, tasks=1)})] * 6
    h = history("w", past, ("now", {}))
    (row,) = h.rows
    assert (row.speed.verdict, row.shape) == (
        "gone",
        ("gone: in 6 of the 6 past runs, not in this one",),
    )
    # a row seen once long ago and not since is neither judged nor gone
    rare = [("r", {})] * 5 + past[:1] + [("r", {})] * 5
    assert history("w", rare, ("now", {})).rows == ()


def test_the_rule_on_designed_values() -> None:
    """Twenty identical runs: the spread is the 10 % floor, so ±35 % is the band."""
    flat = [10.0] * PAST
    assert robust.judge(flat, 13.4, 0.01).verdict == "within noise"
    assert robust.judge(flat, 13.6, 0.01).verdict == "regressed"
    assert robust.judge(flat, 6.4, 0.01).verdict == "improved"
    assert robust.judge(flat[:4], 30.0, 0.01).verdict == "few runs"
    # one wild past run moves neither the median nor the MAD
    wild = [10.0, 10.5, 9.5] * 6 + [10.0, 500.0]
    j = robust.judge(wild, 20.0, 0.01)
    assert (j.median, j.mad, j.verdict) == (10.0, 0.5, "regressed")
    assert j.as_far == 1 and j.p == pytest.approx(2 / 21)


def test_false_alarms_and_detection_over_many_designed_histories() -> None:
    """2,000 histories of 20 runs from the designed noise, 4 unchanged runs judged on
    each: at most 1 in 1,000 flagged (the rule's design: about 1 in 5,000); a 2x
    slower run caught in at least 99 % of them."""
    alarms = caught = 0
    for seed in range(2000):
        rng = random.Random(seed)
        past = [noise(rng) for _ in range(PAST)]
        alarms += sum(
            robust.judge(past, noise(rng), 0.01).verdict != "within noise" for _ in range(4)
        )
        caught += robust.judge(past, 2 * noise(rng), 0.01).verdict == "regressed"
    assert alarms <= 8, alarms
    assert caught >= 1980, caught


def test_the_scale_estimates_the_designed_noise() -> None:
    """1.4826 × MAD of many draws is the noise's standard deviation (10 % of the mean;
    clipping at 3 deviations changes it by well under 1 %)."""
    rng = random.Random(SEED)
    draws = [noise(rng) for _ in range(20_000)]
    median = statistics.median(draws)
    mad = statistics.median(abs(d - median) for d in draws)
    assert robust.MAD_TO_SIGMA * mad == pytest.approx(NOISE, rel=0.03)


def test_the_page_has_a_sparkline_per_row_and_shows_hostile_names_as_text(
    tmp_path: Path,
) -> None:
    assert judged(tmp_path, slower={"clean": SLOWED_BY})[0] == 3
    page = (tmp_path / "runs" / "tonight" / "otel-spans-report" / "history.html").read_text()
    doc = parse(page)
    speed = doc.all("table")[0]
    body = [tr for tr in speed.all("tr") if tr.all("td")]
    assert len(body) == len(ALL_ROWS)
    # one sparkline each: PAST points and this run's point, red where regressed
    for tr in body:
        svg = tr.one("svg")
        assert len(svg.one("polyline").attrs["points"].split()) == PAST  # type: ignore[union-attr]
    clean = next(tr for tr in body if tr.all("td")[1].text() == "clean")
    assert clean.attrs["class"] == "regressed"
    assert clean.one("circle").attrs["fill"] == "#b00020"

    numbers = Numbers(1.0, tasks=1, busy_s=1.0)
    h = history(
        HOSTILE,
        [("past", {("span", HOSTILE): numbers})] * 6,
        (HOSTILE, {("span", HOSTILE): numbers}),
    )
    hostile = history_html.render([h])
    hostile.encode("utf-8")
    names = [tr.all("td")[1].text() for tr in parse(hostile).all("tr") if tr.all("td")]
    assert names == [HOSTILE_SHOWN, HOSTILE_SHOWN]
    assert not parse(hostile).all("script")


def test_the_command_line(tmp_path: Path) -> None:
    write_history(tmp_path / "runs", 6, SEED)
    write_history_run(tmp_path / "tonight", 6, None, slower={"write": 3.0})
    result = run_report(
        "--history", str(tmp_path / "runs"), "--current", str(tmp_path / "tonight"),
        "--fail-if-regressed", "--cpu-hour-price", "0.36",
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert "found 6 past runs" in result.stdout
    assert f"judging {tmp_path / 'tonight'}" in result.stdout
    assert "cost (busy time of each row's own tasks, at 0.36 per CPU hour)" in result.stdout
    assert "regressed: nightly: span nightly/publish; nightly: task group write" in result.stderr
    nothing = run_report("--history", str(tmp_path / "nope"))
    assert nothing.returncode == 2 and "no such file or directory" in nothing.stderr


# Runs found where they are


def test_a_directory_of_runs_reports_the_latest_and_says_which(tmp_path: Path) -> None:
    """Three runs in subdirectories (the demo's layout): the report on their parent
    lists them and reports the latest; --each-run reports each."""
    write_history(tmp_path / "data", 3, SEED)
    out, err = io.StringIO(), io.StringIO()
    assert report(tmp_path / "data", None, stdout=out, stderr=err) == 0, err.getvalue()
    text = out.getvalue()
    assert f"found 3 runs in {tmp_path / 'data'}:" in text
    assert f"reporting the latest, {tmp_path / 'data' / 'run-02'}" in text
    assert text.count("workflow 'nightly'") == 1
    assert (tmp_path / "data" / "run-02" / "otel-spans-report" / "nightly.html").exists()
    out = io.StringIO()
    code = report(tmp_path / "data", tmp_path / "out", stdout=out, stderr=err, each_run=True)
    assert code == 0 and out.getvalue().count("workflow 'nightly'") == 3


def test_one_directory_holding_several_runs(tmp_path: Path) -> None:
    """One scheduler wrote three nights into one directory: three runs, by trace."""
    for day in range(3):
        write_history_run(tmp_path / f"night-{day}", day, None)
    lines = [(tmp_path / f"night-{d}" / "traces.jsonl").read_text() for d in range(3)]
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "traces.jsonl").write_text("".join(reversed(lines)))
    out, err = io.StringIO(), io.StringIO()
    assert report(shared, None, stdout=out, stderr=err) == 0, err.getvalue()
    assert f"found 3 runs in {shared}:" in out.getvalue()
    assert f"reporting the latest, {shared} (run 3/3)" in out.getvalue()
    assert out.getvalue().count("workflow 'nightly'") == 1
    assert "(trace 00000003" in out.getvalue()


def test_dasks_default_span_starts_no_run(tmp_path: Path) -> None:
    """Work outside any span before and after a workflow (Dask's "default" span,
    closed and reopened between them) is one run with it, not two."""
    for day, workflow in ((0, "default"), (1, WORKFLOW), (2, "default")):
        write_history_run(tmp_path / f"part-{day}", day, None, workflow=workflow)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "traces.jsonl").write_text(
        "".join((tmp_path / f"part-{d}" / "traces.jsonl").read_text() for d in range(3))
    )
    (run,) = find_runs(shared)
    assert run.names == ("default", WORKFLOW) and len(run.workflows) == 3


def test_compare_on_parents_of_runs_and_its_messages(tmp_path: Path) -> None:
    write_history(tmp_path / "a", 2, SEED)
    write_history_run(tmp_path / "b" / "x", 5, None)
    out, err = io.StringIO(), io.StringIO()
    code = compare_command(
        tmp_path / "a", tmp_path / "b", workflow=None, json_out=None, out_dir=tmp_path / "o",
        fail_if_slower=None, stdout=out, stderr=err,
    )  # fmt: skip
    assert code == 0, err.getvalue()
    assert f"baseline: {tmp_path / 'a' / 'run-01'}" in out.getvalue()
    out, err = io.StringIO(), io.StringIO()
    code = compare_command(
        tmp_path / "a", tmp_path / "b", workflow="weekly", json_out=None, out_dir=None,
        fail_if_slower=None, stdout=out, stderr=err,
    )  # fmt: skip
    assert code == 1
    assert err.getvalue() == (
        f"otel-spans report: {tmp_path / 'a'} and {tmp_path / 'b'} have no workflow 'weekly'"
        " in common (baseline: 'nightly'; current: 'nightly')\n"
    )


def test_a_directory_without_traces(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    out, err = io.StringIO(), io.StringIO()
    assert report(tmp_path / "empty", None, stdout=out, stderr=err) == 1
    assert err.getvalue() == (
        f"otel-spans report: no OTLP/JSON traces files in or below {tmp_path / 'empty'}\n"
    )


# A history of real runs


#: Seconds per task of each stage (two tasks, one per worker) in the past runs, and
#: in the judged run: transform 1.2 s slower per task, and a stage of its own added.
PAST_STAGES = {"extract": 0.2, "transform": 0.2, "load": 0.1}
SLOWED_STAGES = {"extract": 0.2, "transform": 1.4, "load": 0.1, "publish": 0.1}
#: The least spread of the real runs' rows: an eighth of the transform span's designed
#: change (1.2 s), so that the change is 8 spreads (beyond 3.5) and an unchanged row
#: must jitter by 3.5 x 0.15 = 0.525 s to be flagged. With the report's floor (10 ms),
#: one busy moment of a shared 2-core machine would flag a 0.1 s stage.
REAL_SPREAD_S = (SLOWED_STAGES["transform"] - PAST_STAGES["transform"]) / 8


@cluster_test(240)
async def test_a_history_of_real_runs_names_the_slowed_stage_and_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five real runs of a three-stage workflow, each on a cluster of its own, then a
    sixth with the transform stage slowed and a publish stage added: the transform
    span and group (and so the workflow) regressed, publish new, the rest within
    noise; built from the exported files alone."""
    for n in range(robust.MIN_RUNS):
        await run_stages(tmp_path / "runs" / f"night-{n}", PAST_STAGES)
    await run_stages(tmp_path / "runs" / "tonight", SLOWED_STAGES)
    monkeypatch.setattr(history_module, "SECONDS_FLOOR", REAL_SPREAD_S)
    out, err = io.StringIO(), io.StringIO()
    code = history_command(
        [tmp_path / "runs"], workflow="nightly", json_out=tmp_path / "h.json", stdout=out,
        stderr=err, fail_if_regressed=True,
    )  # fmt: skip
    assert code == 3, err.getvalue()
    assert f"judging {tmp_path / 'runs' / 'tonight'}" in out.getvalue()
    (nightly,) = json.loads((tmp_path / "h.json").read_text())["workflows"]
    assert len(nightly["past_runs"]) == robust.MIN_RUNS
    speed = {(r["kind"], r["name"]): r["speed"]["verdict"] for r in nightly["rows"]}
    regressed = {
        ("workflow", "nightly"),
        ("span", "nightly/transform"),
        ("task group", "transform"),
    }
    new = {("span", "nightly/publish"), ("task group", "publish")}
    rows = {("span", f"nightly/{s}") for s in PAST_STAGES} | {
        ("task group", s) for s in PAST_STAGES
    }
    assert speed == {
        row: "regressed" if row in regressed else "new" if row in new else "within noise"
        for row in rows | regressed | new
    }
    transform = next(r for r in nightly["rows"] if r["name"] == "transform")
    # from the design: 2 tasks of 0.2 s in every past run, of 1.4 s tonight
    assert 0.4 <= transform["speed"]["median"] < 0.6
    assert 2.8 <= transform["speed"]["current"] < 3.0
