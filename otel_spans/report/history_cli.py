"""``otel-spans report --history DIR...``: arguments, runs in, verdicts out.

The runs are found where they are (:func:`runs.find_runs`: each directory searched
recursively); the latest run, or the latest under ``--current DIR``, is judged against
every other run of the same workflow (:mod:`.history`). Text goes to stdout, the page
to ``<current run>/otel-spans-report/history.html`` (or ``-o DIR``), JSON to
``--json FILE``; exit 3 with ``--fail-if-regressed`` when a row regressed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from otel_spans.report import history_html, history_json, history_text
from otel_spans.report.build import BuiltWorkflow
from otel_spans.report.history import Sample, WorkflowHistory, history
from otel_spans.report.load import REPORT_DIRECTORY, InputError
from otel_spans.report.markup import printable
from otel_spans.report.numbers import rows
from otel_spans.report.runs import Run, describe, find_runs, when

#: Exit code when a row regressed under ``--fail-if-regressed`` (as ``--fail-if-slower``).
REGRESSED_EXIT = 3


def add_arguments(rep: argparse.ArgumentParser) -> None:
    """``--history`` and its options, on the ``report`` subcommand."""
    rep.add_argument(
        "--history",
        nargs="+",
        metavar="DIR",
        help="judge the latest run against every earlier run found in these directories:"
        " per workflow, span and task group, regressed / improved / within noise / new / gone",
    )
    rep.add_argument(
        "--current", metavar="DIR", help="with --history: the run to judge (default: the latest)"
    )
    rep.add_argument(
        "--fail-if-regressed",
        action="store_true",
        help=f"with --history: exit {REGRESSED_EXIT} when a row's speed or cost regressed",
    )
    rep.add_argument(
        "--cpu-hour-price",
        type=float,
        metavar="PRICE",
        help="with --history: cost in money at this price per CPU hour (default: thread-seconds)",
    )
    rep.add_argument(
        "--all-rows", action="store_true", help="with --history: list rows within noise too"
    )


def _print(text: str, out: TextIO) -> None:
    print(printable(text), file=out)


def _latest_of(run: Run, name: str) -> BuiltWorkflow | None:
    found = [b for b in run.workflows if b.workflow.name == name]
    return found[-1] if found else None


def judge_runs(
    past: list[Run], current: Run, workflow: str | None, price: float | None
) -> list[WorkflowHistory]:
    """Each workflow of ``current`` (or ``workflow`` alone) against ``past``."""
    out = []
    for name in [workflow] if workflow else list(current.names):
        now = _latest_of(current, name)
        if now is None:
            continue
        samples: list[Sample] = []
        for run in past:
            built = _latest_of(run, name)
            if built is not None:
                samples.append((run.label, rows(built)))
        out.append(history(name, samples, (current.label, rows(now)), price=price))
    return out


def run(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO) -> int:
    """Run ``report --history``; returns the exit code."""
    return history_command(
        [Path(p) for p in args.history],
        current=Path(args.current) if args.current else None,
        workflow=args.workflow,
        json_out=Path(args.json) if args.json else None,
        out_dir=Path(args.out) if args.out else None,
        fail_if_regressed=args.fail_if_regressed,
        price=args.cpu_hour_price,
        all_rows=args.all_rows,
        stdout=stdout,
        stderr=stderr,
    )


def history_command(
    directories: list[Path],
    *,
    current: Path | None = None,
    workflow: str | None = None,
    json_out: Path | None = None,
    out_dir: Path | None = None,
    fail_if_regressed: bool = False,
    price: float | None = None,
    all_rows: bool = False,
    stdout: TextIO,
    stderr: TextIO,
) -> int:
    """``otel-spans report --history``: exit 0, 1 (nothing to judge), 2 (bad input) or
    3 (``fail_if_regressed`` and a row regressed)."""
    if price is not None and price < 0:
        print("otel-spans report: --cpu-hour-price must be >= 0", file=stderr)
        return 2
    try:
        found: dict[tuple[str, int], Run] = {}
        for directory in directories:
            for r in find_runs(directory):
                found.setdefault((str(r.source.resolve()), r.index), r)
        candidates = find_runs(current) if current is not None else []
    except InputError as e:
        print(f"otel-spans report: {e}", file=stderr)
        return 2
    if workflow is not None:
        candidates = [r for r in candidates if workflow in r.names]
    runs = sorted(found.values(), key=lambda r: (r.start_ns, r.label))
    if workflow is not None:
        runs = [r for r in runs if workflow in r.names]
    if current is None and runs:
        candidates = runs[-1:]
    if not candidates:
        where = current if current is not None else ", ".join(map(str, directories))
        what = f"of workflow {workflow!r} " if workflow else ""
        print(f"otel-spans report: no run {what}in or below {where}", file=stderr)
        return 1
    now = candidates[-1]
    past = [r for r in runs if r.trace_ids.isdisjoint(now.trace_ids)]
    _print(f"found {len(past)} past runs:", stdout)
    for line in describe(past):
        _print(line, stdout)
    _print(f"judging {now.label}, started {when(now.start_ns)}\n", stdout)
    histories = judge_runs(past, now, workflow, price)
    if not histories:
        print(f"otel-spans report: {now.label} holds no workflow {workflow!r}", file=stderr)
        return 1
    _print(history_text.render(histories, all_rows=all_rows), stdout)
    elsewhere = sorted({n for r in past for n in r.names} - set(now.names))
    if elsewhere and workflow is None:
        _print(
            "  not in this run (past runs only): " + ", ".join(repr(n) for n in elsewhere),
            stdout,
        )
    if json_out is not None:
        json_out.write_text(history_json.render(histories), encoding="utf-8")
    source = now.source if now.source.is_dir() else now.source.parent
    target = out_dir or source / REPORT_DIRECTORY
    target.mkdir(parents=True, exist_ok=True)
    page = target / "history.html"
    page.write_text(history_html.render(histories), encoding="utf-8")
    print(f"  wrote {page}", file=stdout)
    regressed = [f"{h.workflow}: {r.kind} {r.name}" for h in histories for r in h.regressed]
    if fail_if_regressed and regressed:
        _print("otel-spans report: regressed: " + "; ".join(regressed), stderr)
        return REGRESSED_EXIT
    return 0
