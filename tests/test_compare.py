"""``otel-spans report --compare``: two real runs, the second with one stage made
slower on purpose (and one stage added); the report finds and names them."""

from __future__ import annotations

import json
from pathlib import Path

from dask.delayed import delayed
from distributed import span

from otel_spans.report import compare_html
from otel_spans.report.compare import Comparison, Numbers, Row
from tests.cluster import cluster_test, traced_cluster
from tests.test_html import HOSTILE, HOSTILE_SHOWN, parse
from tests.test_report_cli import run_report
from tests.test_workflow_analysis import step

#: Seconds per task of each stage, two tasks each; the current run's transform is
#: 0.6 s slower (beyond the noise thresholds), and it publishes too.
BASELINE = {"extract": 0.2, "transform": 0.2, "load": 0.1}
CURRENT = {"extract": 0.2, "transform": 0.8, "load": 0.1, "publish": 0.1}


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


@cluster_test(120)
async def test_compare_names_the_stage_that_got_slower(tmp_path: Path) -> None:
    await run_stages(tmp_path / "baseline", BASELINE)
    await run_stages(tmp_path / "current", CURRENT)
    base, cur = str(tmp_path / "baseline"), str(tmp_path / "current")

    result = run_report("--compare", base, cur, "--json", str(tmp_path / "compare.json"))
    assert result.returncode == 0, result.stderr
    assert "workflow 'nightly': slower" in result.stdout, result.stdout
    document = json.loads((tmp_path / "compare.json").read_text())
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
    # from the design: 2 tasks of 0.2 s, then of 0.8 s
    assert 0.4 <= transform["baseline"]["compute_s"] < 0.6
    assert 1.6 <= transform["current"]["compute_s"] < 1.8
    assert transform["current"]["tasks"] == 2
    assert any(key.startswith("transform") for key in workflow["current_path"])

    # CI use: the workflow is about 1.6x slower
    assert run_report("--compare", base, cur, "--fail-if-slower", "20%").returncode == 3
    assert run_report("--compare", base, cur, "--fail-if-slower", "500%").returncode == 0
    # a run compared with itself: nothing changed
    same = run_report("--compare", base, base, "--json", str(tmp_path / "same.json"))
    workflows = json.loads((tmp_path / "same.json").read_text())["workflows"]
    verdicts_same = {r["verdict"] for w in workflows for r in w["rows"]}
    assert same.returncode == 0 and verdicts_same == {"same"}
    missing = run_report("--compare", base, cur, "--workflow", "weekly")
    assert missing.returncode == 1 and "share no workflow 'weekly'" in missing.stderr


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
