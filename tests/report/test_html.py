"""The HTML report: content, escaping, self-containment, and a real browser loading it.

The browser test runs when Debian's ``chromium`` is installed (``apt-get install -y
chromium``): headless, no sandbox (root), no network features, a throwaway profile.
"""

from __future__ import annotations

import re
from pathlib import Path

from otel_spans.analysis.model import DaskSpan, TaskRun, ThreadInterval, Workflow
from otel_spans.analysis.workflow import analyse
from otel_spans.report.html import render
from tests.support.browser import CHROMIUM, chromium_dump
from tests.support.golden import GOLDEN_PATH, W1, at, golden_run, hostile_run
from tests.support.html import HOSTILE_SHOWN, parse
from tests.support.requirements import require_file


def page_of(workflow: Workflow, spans: list[DaskSpan], **kw: int) -> str:
    return render(workflow, analyse(workflow), spans, **kw)


def test_golden_report_content() -> None:
    doc = parse(page_of(*golden_run()))
    assert doc.one("head").one("title").text() == "ml-pipeline · otel-spans report"
    assert doc.one("h1").text() == "ml-pipeline"
    cards = {
        c.all("div", class_="label")[0].text(): c.all("div", class_="value")[0].text()
        for c in doc.all("div", class_="card")
    }
    assert cards["Wall time"] == "5.4 s"
    assert cards["Parallel efficiency"] == "38.9 %"  # 6.3 / 16.2
    assert cards["Speedup"] == "1.17×"
    assert cards["Critical path"] == "5.2 s"
    for section in ("waterfall", "critical-path", "activity", "bottlenecks", "stragglers"):
        doc.one("section", id=section)

    svg = doc.one("svg", id="waterfall-svg")
    labels = [t.own_text() for t in svg.all("text") if t.attrs.get("class") in {"span", "group"}]
    # Spans in tree order, each followed by the groups that ran directly in it.
    assert labels == [
        "pipeline",
        "prepare",
        "fetch-abc123",
        "validate-abc123",
        "features",
        "feature_b-abc123",
        "feature_c-abc123",
        "feature_a",
        "feature_a-abc123",
        "model",
        "train-abc123",
        "evaluate-abc123",
        "deploy-abc123",
    ]
    assert len(svg.all("rect", class_="span d0")) == 1
    assert len(svg.all("rect", class_="task")) == 8  # few tasks: drawn one by one
    # The critical path: a bar per step on its row, and marks on the group rows.
    bars = svg.all("rect", class_="cp")
    assert [b.attrs["id"] for b in bars] == [f"cp-{n}" for n in range(6)]
    assert [b.one("title").text().split(" ")[0] for b in bars] == list(GOLDEN_PATH)
    assert len(svg.all("rect", class_="cp-mark")) == 6

    steps = [
        [td.text() for td in tr.all("td")]
        for tr in doc.one("section", id="critical-path").all("tr")
        if "data-cp" in tr.attrs
    ]
    assert [row[1] for row in steps] == list(GOLDEN_PATH)
    assert steps[4][5] == "100 ms"  # evaluate waited to be scheduled
    bottleneck_rows = doc.one("section", id="bottlenecks").all("tr")[1:]
    assert [tr.all("td")[0].text() for tr in bottleneck_rows][:2] == ["train", "feature_a"]
    activity = [t.text() for t in doc.one("section", id="activity").all("text")]
    assert activity[:2] == ["thread-cpu", "5.5 s · 91.7 %"]
    assert "No task ran much longer" in doc.one("section", id="stragglers").text()


def test_hostile_names_are_escaped() -> None:
    page = page_of(*hostile_run())
    page.encode("utf-8")  # no lone surrogate survives
    assert "<script>alert" not in page
    assert not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", page)
    doc = parse(page)
    assert len(doc.all("script")) == 1  # ours, which holds no user string
    assert HOSTILE_SHOWN not in doc.one("script").text()
    assert doc.one("h1").text() == HOSTILE_SHOWN
    assert doc.one("head").one("title").text() == f"{HOSTILE_SHOWN} · otel-spans report"
    span_label = doc.one("svg", id="waterfall-svg").all("text", class_="span")[0]
    assert span_label.one("title").text() == HOSTILE_SHOWN
    steps = [tr for tr in doc.all("tr") if "data-cp" in tr.attrs]
    assert [tr.all("td")[1].text() for tr in steps] == [HOSTILE_SHOWN, "next"]
    for node in doc.all():
        for value in node.attrs.values():
            assert value is None or "<" not in value


def test_self_contained() -> None:
    page = page_of(*golden_run())
    assert "http://" not in page and "https://" not in page
    doc = parse(page)
    assert not doc.all("link") and not doc.all("img") and not doc.all("iframe")
    for node in doc.all():
        assert "src" not in node.attrs
        href = (node.attrs.get("href") or "").strip()
        assert not href or href.startswith("#")
    style = doc.one("style").text()
    assert "url(" not in style and "@import" not in style


def test_renderer_keeps_no_state_between_calls() -> None:
    first = page_of(*golden_run())
    page_of(*hostile_run())
    assert page_of(*golden_run()) == first


def test_empty_workflow() -> None:
    doc = parse(page_of(Workflow("nothing", at(0), at(0)), []))
    assert "No tasks ran." in doc.one("section", id="critical-path").text()
    assert "No worker activity" in doc.one("section", id="activity").text()
    assert not doc.all("section", id="bottlenecks")


def test_large_groups_become_heat_strips_and_rows_are_capped() -> None:
    tasks = tuple(
        TaskRun(f"g{g}-{i}", f"p{g}", f"g{g}", W1, i % 8, at(i), at(i + 8 + g), (f"g{g}-{i - 1}",))
        for g in range(6)
        for i in range(200)
    )
    workflow = Workflow("many", at(0), at(220), tasks, (ThreadInterval(at(0), at(220), 8),))
    doc = parse(page_of(workflow, [], max_groups=4, max_rows=3, max_path_rows=2))
    svg = doc.one("svg", id="waterfall-svg")
    groups = [t.own_text() for t in svg.all("text", class_="group")]
    assert sorted(groups) == ["g2", "g3", "g4", "g5"]  # the most compute time
    assert not svg.all("rect", class_="task")
    assert svg.all("rect", class_="heat")
    assert "2 smaller task groups not shown" in doc.one("section", id="waterfall").text()
    assert "3 more prefixes not shown" in doc.one("section", id="bottlenecks").text()
    steps = [tr for tr in doc.all("tr") if "data-cp" in tr.attrs]
    assert len(steps) == 2
    assert "198 more steps not shown" in doc.one("section", id="critical-path").text()


# A test-only script appended to the page: it drives the report's own handlers the
# way a person would (two clicks on a column header, the pointer over the timeline)
# and writes what happened into attributes that --dump-dom shows.
_DRIVER = """<script>
(function () {
  var header = document.querySelectorAll("#bottlenecks th")[2];
  var firstPrefix = function () {
    return document.querySelector("#bottlenecks tbody tr td").textContent;
  };
  header.click();
  document.body.setAttribute("data-sorted-desc", firstPrefix());
  header.click();
  document.body.setAttribute("data-sorted-asc", firstPrefix());
  var svg = document.getElementById("waterfall-svg");
  var box = svg.getBoundingClientRect();
  var x0 = parseFloat(svg.getAttribute("data-x0")), w = parseFloat(svg.getAttribute("data-w"));
  svg.dispatchEvent(new MouseEvent("mousemove", {
    clientX: box.left + (x0 + w / 2) * box.width / svg.viewBox.baseVal.width,
    clientY: box.top + 40, bubbles: true}));
  document.body.setAttribute("data-cursor",
    document.getElementById("cursor-label").textContent);
})();
</script></body>"""


def test_chromium_loads_the_report_without_errors(tmp_path: Path) -> None:
    require_file(CHROMIUM, "Debian's chromium opens the report headless")
    page = tmp_path / "report.html"
    page.write_text(page_of(*golden_run()).replace("</body>", _DRIVER), encoding="utf-8")
    dom, log = chromium_dump(page, tmp_path)
    body = parse(dom).one("body")
    assert body.attrs.get("data-ready") == "1"
    assert "data-js-error" not in body.attrs
    assert not [line for line in log.splitlines() if ":CONSOLE" in line], log
    assert body.attrs["data-sorted-desc"] == "train"  # 2 s of compute
    assert body.attrs["data-sorted-asc"] == "deploy"  # 200 ms
    assert re.fullmatch(r"\+2\.\d{3} s", body.attrs["data-cursor"] or ""), body.attrs
    labels = {t.own_text() for t in body.all("text", class_="span")}
    assert {"pipeline", "prepare", "features", "feature_a", "model"} <= labels


def test_chromium_shows_hostile_names_as_text(tmp_path: Path) -> None:
    require_file(CHROMIUM, "Debian's chromium opens the report headless")
    page = tmp_path / "hostile.html"
    page.write_text(page_of(*hostile_run()), encoding="utf-8")
    dom, log = chromium_dump(page, tmp_path)
    body = parse(dom).one("body")
    assert body.attrs.get("data-ready") == "1"
    assert "data-js-error" not in body.attrs
    assert not [line for line in log.splitlines() if ":CONSOLE" in line], log
    assert body.one("h1").text() == HOSTILE_SHOWN
    assert len(body.all("script")) == 1
