"""``otel-spans report --compare BASELINE CURRENT``: two runs in, verdicts out.

The latest run under each path is found (:func:`runs.find_runs`), read in full and
compared workflow by workflow (:mod:`.compare`). Text goes to stdout, the page to
``<current>/otel-spans-report/compare.html`` (or ``-o DIR``), JSON to ``--json FILE``;
exit 3 with ``--fail-if-slower`` when a workflow got slower by more than that.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from otel_spans.report import compare_html, compare_json, compare_text
from otel_spans.report.build import BuiltWorkflow, build_workflows
from otel_spans.report.compare import compare as compare_runs
from otel_spans.report.load import InputError, load_spans
from otel_spans.report.markup import printable
from otel_spans.report.runs import Run, find_runs, when


def _names(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names[:10]) or "no Dask spans"


def load_run(run: Run) -> list[BuiltWorkflow]:
    """A run found by :func:`find_runs` read in full: every span of its traces."""
    return build_workflows(s for s in load_spans(run.source) if s.trace_id in run.trace_ids)


def parse_percent(text: str) -> float:
    """``20%`` or ``20`` -> 0.2; ValueError for anything else."""
    value = float(text.strip().removesuffix("%"))
    if value < 0:
        raise ValueError(text)
    return value / 100


def compare(
    baseline: Path,
    current: Path,
    *,
    workflow: str | None,
    json_out: Path | None,
    out_dir: Path | None,
    fail_if_slower: str | None,
    stdout: TextIO,
    stderr: TextIO,
) -> int:
    """``otel-spans report --compare``: the text to ``stdout``, the HTML page into
    ``out_dir`` (default: ``CURRENT/otel-spans-report``), JSON to ``json_out``; exit 0,
    1 (nothing to compare), 2 (bad input) or 3 (a workflow got slower than
    ``fail_if_slower``)."""
    try:
        limit = parse_percent(fail_if_slower) if fail_if_slower is not None else None
    except ValueError:
        print(
            f"otel-spans report: --fail-if-slower {fail_if_slower!r}: expected e.g. 20%",
            file=stderr,
        )
        return 2
    try:
        current_runs = [r for r in find_runs(current) if workflow is None or workflow in r.names]
        baseline_runs = find_runs(baseline)
        if current_runs:
            wanted = {workflow} if workflow else set(current_runs[-1].names)
            baseline_runs = [r for r in baseline_runs if wanted & set(r.names)] or baseline_runs
        comparisons = (
            compare_runs(load_run(baseline_runs[-1]), load_run(current_runs[-1]), workflow)
            if baseline_runs and current_runs
            else []
        )
    except InputError as e:
        print(f"otel-spans report: {e}", file=stderr)
        return 2
    if not comparisons:
        base_names = sorted({n for r in baseline_runs for n in r.names})
        cur_names = sorted({n for r in find_runs(current) for n in r.names})
        what = f"workflow {workflow!r}" if workflow else "workflow name"
        print(
            f"otel-spans report: {baseline} and {current} have no {what} in common"
            f" (baseline: {_names(base_names)}; current: {_names(cur_names)})",
            file=stderr,
        )
        return 1
    for side, run in (("baseline", baseline_runs[-1]), ("current", current_runs[-1])):
        # printable(): names may hold lone surrogates, which no stream can encode.
        print(printable(f"{side}: {run.label}, started {when(run.start_ns)}"), file=stdout)
    print(printable(compare_text.render(comparisons)), file=stdout)
    if json_out is not None:
        json_out.write_text(compare_json.render(comparisons), encoding="utf-8")
    target = out_dir or (current if current.is_dir() else current.parent) / "otel-spans-report"
    target.mkdir(parents=True, exist_ok=True)
    page = target / "compare.html"
    page.write_text(compare_html.render(comparisons), encoding="utf-8")
    print(f"  wrote {page} (side by side)", file=stdout)
    if limit is not None:
        slower = [
            c.workflow
            for c in comparisons
            if c.wall.ratio is not None and c.wall.verdict == "slower" and c.wall.ratio > 1 + limit
        ]
        if slower:
            print(
                f"otel-spans report: slower than the baseline by more than {limit:.0%}: "
                + ", ".join(slower),
                file=stderr,
            )
            return 3
    return 0
