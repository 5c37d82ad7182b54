"""``otel-spans report --compare``: two real runs, the second with one stage made
slower on purpose (and one stage added); the report finds and names them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from dask.delayed import delayed
from distributed import span

from otel_spans.report import compare, compare_html
from otel_spans.report.compare import Comparison, Numbers, Row, verdict
from otel_spans.report.compare_cli import compare as compare_command
from tests.support.cluster import cluster_test, traced_cluster
from tests.support.html import HOSTILE, HOSTILE_SHOWN, parse
from tests.support.report import run_report
from tests.support.tasks import step

#: Seconds per task of each stage, two tasks each, one per worker; the current run's
#: transform is 1.2 s slower per task (so its span's wall time grows by 1.2 s and its
#: group's compute by 2.4 s), and it publishes too.
BASELINE = {"extract": 0.2, "transform": 0.2, "load": 0.1}
CURRENT = {"extract": 0.2, "transform": 1.4, "load": 0.1, "publish": 0.1}
#: The noise threshold the runs are compared with: half the smallest designed change
#: of a slowed row (the transform span's 1.2 s). Unchanged rows would have to jitter
#: by 0.6 s between the runs to be called slower (with the report's default, 0.1 s,
#: one busy moment on a shared 2-core machine was enough); a slowed row would have to
#: lose half its designed change to noise to be called same.
DESIGNED_NOISE_S = (CURRENT["transform"] - BASELINE["transform"]) / 2


async def run_stages(directory: Path, stages: dict[str, float]) -> None:
    async with traced_cluster({"otel-spans.directory": str(directory)}) as (client, _, _):
        # Warm the workers outside the workflow: a fresh cluster's first task pays for
        # start-up, which would make the first stage of one run differ by more than noise.
        warm = [delayed(step)(0.0, dask_key_name="warm-0")]
        assert await client.gather(client.compute(warm)) == [0.0]
        with span("nightly"):
            for stage, seconds in stages.items():
                with span(stage):
                    work = [delayed(step)(seconds, dask_key_name=f"{stage}-{i}") for i in range(2)]
                    assert await client.gather(client.compute(work)) == [seconds, seconds]


def test_verdicts_at_the_noise_thresholds() -> None:
    """The thresholds the cluster test below sets aside, on designed numbers: a change
    within 0.1 s or within 10 % is noise, anything beyond both is a verdict."""
    assert (compare.NOISE_SECONDS, compare.NOISE_RATIO) == (0.1, 0.10)
    assert verdict(0.5, 0.6) == "same"  # 0.1 s: within the seconds threshold
    assert verdict(0.5, 0.61) == "slower"  # 0.11 s and 22 %: beyond both
    assert verdict(5.0, 5.5) == "same"  # 0.5 s but 10 %: within the ratio
    assert verdict(5.0, 4.4) == "faster"
    assert (verdict(None, 1.0), verdict(1.0, None)) == ("new", "gone")


@cluster_test(120)
async def test_compare_names_the_stage_that_got_slower(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every row's verdict is the designed one: a comparison that calls everything
    slower (or same) fails on the unchanged (or slowed) rows, one that matches spans
    by name only fails on the new publish rows."""
    await run_stages(tmp_path / "baseline", BASELINE)
    await run_stages(tmp_path / "current", CURRENT)
    base, cur = str(tmp_path / "baseline"), str(tmp_path / "current")

    monkeypatch.setattr(compare, "NOISE_SECONDS", DESIGNED_NOISE_S)
    stdout, stderr = io.StringIO(), io.StringIO()
    code = compare_command(
        Path(base),
        Path(cur),
        workflow=None,
        json_out=tmp_path / "compare.json",
        out_dir=None,
        fail_if_slower=None,
        stdout=stdout,
        stderr=stderr,
    )
    assert code == 0, stderr.getvalue()
    assert "workflow 'nightly': slower" in stdout.getvalue(), stdout.getvalue()
    document = json.loads((tmp_path / "compare.json").read_text())
    assert document["noise"] == {"ratio": 0.10, "seconds": DESIGNED_NOISE_S}
    # the warm-up task ran outside any span: Dask's "default" span, compared too
    by_name = {w["workflow"]: w for w in document["workflows"]}
    assert set(by_name) == {"nightly", "default"}
    workflow = by_name["nightly"]
    verdicts = {(r["kind"], r["name"]): r["verdict"] for r in workflow["rows"]}
    assert verdicts == {
        ("workflow", "nightly"): "slower",
        ("span", "nightly/extract"): "same",
        ("span", "nightly/transform"): "slower",
        ("span", "nightly/load"): "same",
        ("span", "nightly/publish"): "new",
        ("task group", "extract"): "same",
        ("task group", "transform"): "slower",
        ("task group", "load"): "same",
        ("task group", "publish"): "new",
    }
    page = (tmp_path / "current" / "otel-spans-report" / "compare.html").read_text()
    assert '<tr class="slower"><td>span</td><td>nightly/transform</td>' in page
    assert '<tr class="new"><td>task group</td><td>publish</td>' in page
    transform = next(r for r in workflow["rows"] if r["name"] == "transform")
    # from the design: 2 tasks of 0.2 s, then of 1.4 s
    assert 0.4 <= transform["baseline"]["compute_s"] < 0.6
    assert 2.8 <= transform["current"]["compute_s"] < 3.0
    assert transform["current"]["tasks"] == 2
    assert any(key.startswith("transform") for key in workflow["current_path"])

    # CI use, through the command line: the workflow is about 3x slower
    assert run_report("--compare", base, cur, "--fail-if-slower", "20%").returncode == 3
    assert run_report("--compare", base, cur, "--fail-if-slower", "500%").returncode == 0
    # a run compared with itself: nothing changed
    same = run_report("--compare", base, base, "--json", str(tmp_path / "same.json"))
    workflows = json.loads((tmp_path / "same.json").read_text())["workflows"]
    verdicts_same = {r["verdict"] for w in workflows for r in w["rows"]}
    assert same.returncode == 0 and verdicts_same == {"same"}
    missing = run_report("--compare", base, cur, "--workflow", "weekly")
    assert missing.returncode == 1 and "have no workflow 'weekly' in common" in missing.stderr


def test_the_page_shows_hostile_names_as_text() -> None:
    """A workflow, span, task group and critical-path key named with markup, control
    characters and a lone surrogate: the page encodes as UTF-8 (with ``html.escape``
    alone the surrogate raised UnicodeEncodeError when the page was written) and a
    parser reads every name as text (an escaper that missed ``<`` would inject)."""
    numbers = Numbers(1.0, tasks=1)
    rows = tuple(
        Row(kind, name, numbers, numbers, "same", 1.0)
        for kind, name in (
            ("workflow", HOSTILE),
            ("span", f"{HOSTILE}/stage"),
            ("task group", HOSTILE),
        )
    )
    page = compare_html.render([Comparison(HOSTILE, rows, (HOSTILE, "next-0"), ("next-0",))])
    page.encode("utf-8")
    doc = parse(page)
    assert not doc.all("script")
    names = [tr.all("td")[1].text() for tr in doc.all("tr") if tr.all("td")]
    assert names == [HOSTILE_SHOWN, f"{HOSTILE_SHOWN}/stage", HOSTILE_SHOWN]
    assert doc.all("h2")[0].text() == f"{HOSTILE_SHOWN}: same"
    assert [li.text() for li in doc.all("li")] == [HOSTILE_SHOWN, "next-0", "next-0"]
