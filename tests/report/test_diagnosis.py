"""The report's diagnosis of the designed run (tests/support/golden_trace.py): its
evidence read from the spans, the text section, ``--json`` and the HTML links."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from pathlib import Path

from otel_spans.analysis.workflow import analyse
from otel_spans.report import diagnose
from otel_spans.report.build import build_workflows
from otel_spans.report.cli import report
from otel_spans.report.load import load_spans
from otel_spans.report.memory import MemoryEvidence, MemoryRow
from tests.support.golden_trace import write_run

MB = 1_000_000


def test_evidence_is_read_from_the_designed_spans(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    nightly = next(b for b in build_workflows(load_spans(run)) if b.workflow.name == "nightly")
    evidence = diagnose.evidence(nightly, analyse(nightly.workflow))
    fit = next(g for g in evidence.groups if g.name == "fit-7a8b")
    # from the design: two tasks, one erred after 50 ms, 1.0 s of compute in all
    assert (fit.tasks, fit.runs, fit.erred, fit.compute_s) == (2, 2, 1, 1.0)
    assert evidence.activities["disk-read"] == 0.375
    assert not evidence.path_of_groups  # every task run is in the trace


def test_memory_evidence_names_the_group_that_held_the_most(tmp_path: Path) -> None:
    """The designed run with memory rows put in: ``fit-7a8b`` of span ``nightly/fit``
    held 8 MB at its peak (its larger of two exports), ``sums-3c4d`` 1 MB; two spans
    paused once each, for 0.25 s and 0.5 s, and spilled 3 MB in all."""
    run = write_run(tmp_path / "run")
    nightly = next(b for b in build_workflows(load_spans(run)) if b.workflow.name == "nightly")

    def row(span: str, group: str, peak: int, spilled: int, pauses: int, s: float) -> MemoryRow:
        return MemoryRow(span, group, peak, 0, spilled, spilled // 2, pauses, s, 0)

    memory = MemoryEvidence(
        tree_peak=9 * MB,
        spans=(row("nightly/fit", "", 8 * MB, 2 * MB, 1, 0.25), row("nightly", "", MB, MB, 1, 0.5)),
        groups=(
            row("nightly/fit", "fit-7a8b", 8 * MB, 0, 0, 0.0),
            row("nightly/fit", "fit-7a8b", 5 * MB, 0, 0, 0.0),
            row("nightly", "sums-3c4d", MB, 0, 0, 0.0),
        ),
        lost_workers=(),
    )
    built = replace(nightly, memory=memory)
    evidence = diagnose.evidence(built, analyse(built.workflow))
    fit = next(g for g in evidence.groups if g.name == "fit-7a8b")
    assert (fit.span, fit.peak_bytes) == ("nightly/fit", 8 * MB)
    assert (evidence.peak_bytes, evidence.spilled_bytes, evidence.unspilled_bytes) == (
        9 * MB,
        3 * MB,
        MB + MB // 2,
    )
    assert (evidence.pauses, evidence.pause_s, evidence.workers_lost) == (2, 0.75, 0)
    found = diagnose.findings(built, analyse(built.workflow))
    subjects = {f.id: (f.subject, f.subject_kind) for f in found}
    assert subjects["memory-pressure"] == ("fit-7a8b", "group")
    assert subjects["spilling"] == ("fit-7a8b", "group")


def test_json_and_text_carry_the_findings_in_rank_order(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    stdout, stderr = io.StringIO(), io.StringIO()
    out = tmp_path / "diagnosis.json"
    assert report(run, tmp_path / "out", stdout=stdout, stderr=stderr, json_out=out) == 0
    workflows = {w["name"]: w for w in json.loads(out.read_text())["workflows"]}
    first = workflows["nightly"]["diagnosis"][0]
    # the designed failure: one erred task in fit-7a8b, critical whatever its share
    assert (first["id"], first["severity"], first["subject"]) == ("erred", "critical", "fit-7a8b")
    assert set(first) == {
        "id",
        "severity",
        "subject",
        "subject_kind",
        "evidence",
        "share",
        "advice",
    }
    assert first["evidence"]["erred_tasks"] == 1
    for w in workflows.values():
        assert sum(f["share"] for f in w["diagnosis"]) <= 1.0 + 1e-9
    text = stdout.getvalue()
    # right after the summary header, before the timeline
    assert text.index("diagnosis (why it took this long") < text.index("timeline:")
    assert "1. erred [critical]" in text


def test_html_findings_link_to_their_group(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    assert report(run, tmp_path / "out", stdout=io.StringIO(), stderr=io.StringIO()) == 0
    page = (tmp_path / "out" / "nightly.html").read_text()
    section = page[page.index('<section id="diagnosis">') :]
    section = section[: section.index("</section>")]
    targets = re.findall(r'href="#([^"]+)"', section)
    assert targets
    for target in targets:
        assert f'id="{target}"' in page, target
