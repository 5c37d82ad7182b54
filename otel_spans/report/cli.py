"""``otel-spans report`` and ``otel-spans tree``: arguments, files in, files out.

Everything the offline commands do besides rendering is here: parsing their
arguments, loading the files, choosing where outputs go, writing them and the exit
code. The renderers (one module per output, each with one ``render``) never touch a
file or a stream.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from otel_spans.analysis.workflow import analyse
from otel_spans.report import (
    compare_cli,
    diagnose,
    history_cli,
    html,
    lookup,
    memory,
    perfetto,
    summary,
    tree,
)
from otel_spans.report.build import build_workflows
from otel_spans.report.load import (
    REPORT_DIRECTORY,
    InputError,
    LoadedSpan,
    is_dask_or_group_span,
    load_activity,
    load_profiles,
    load_spans,
    trace_sources,
)
from otel_spans.report.markup import printable
from otel_spans.report.runs import describe, find_runs, split

#: A progress line every this many spans loaded.
PROGRESS_EVERY = 200_000


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``tree`` and ``report`` subcommands, on the top-level parser's subparsers."""
    tree_command = commands.add_parser(
        "tree", help="print the traces in OTLP/JSON files as a timeline"
    )
    tree_command.add_argument(
        "path", help="an OTLP/JSON lines file, or a directory (searched recursively)"
    )
    rep = commands.add_parser(
        "report",
        help="critical path, bottlenecks, efficiency; writes a Perfetto trace and an HTML report",
    )
    rep.add_argument(
        "path",
        nargs="?",
        help="an OTLP/JSON lines file, or a directory of runs (searched recursively)",
    )
    rep.add_argument(
        "-o", "--out", help="where to write (default: otel-spans-report/ in the run's directory)"
    )
    rep.add_argument(
        "--compare",
        nargs=2,
        metavar=("BASELINE", "CURRENT"),
        help="compare two runs (files or directories): wall, compute, bytes, counts per span"
        " and task group, with a verdict each",
    )
    rep.add_argument(
        "--each-run",
        action="store_true",
        help="when PATH holds several runs, report each (default: the latest)",
    )
    history_cli.add_arguments(rep)
    rep.add_argument(
        "--workflow", help="with --compare or --history: the root span name to compare"
    )
    rep.add_argument(
        "--json",
        help="also write JSON here: each workflow's diagnosis (with --compare or --history:"
        " the verdicts)",
    )
    rep.add_argument(
        "--fail-if-slower",
        metavar="PERCENT",
        help="with --compare: exit 3 when a workflow's wall time grew by more (e.g. 20%%)",
    )
    one = rep.add_mutually_exclusive_group()
    one.add_argument("--key", help="print everything recorded for one task (its Dask key)")
    one.add_argument(
        "--group", help="print everything recorded for one task group (its name or prefix)"
    )


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run a parsed ``tree`` or ``report`` command; returns the exit code."""
    if args.command == "tree":
        return tree_command(Path(args.path), stdout=sys.stdout, stderr=sys.stderr)
    if args.compare:
        baseline, current = args.compare
        return compare_cli.compare(
            Path(baseline),
            Path(current),
            workflow=args.workflow,
            json_out=Path(args.json) if args.json else None,
            out_dir=Path(args.out) if args.out else None,
            fail_if_slower=args.fail_if_slower,
            stdout=sys.stdout,
            stderr=sys.stderr,
        )
    if args.history:
        return history_cli.run(args, stdout=sys.stdout, stderr=sys.stderr)
    if args.path is None:
        parser.error("report: give a PATH, --compare BASELINE CURRENT or --history DIR...")
    return report(
        Path(args.path),
        Path(args.out) if args.out else None,
        stdout=sys.stdout,
        stderr=sys.stderr,
        key=args.key,
        group=args.group,
        each_run=args.each_run,
        json_out=Path(args.json) if args.json else None,
    )


def _print(text: str, out: TextIO) -> None:
    # Names may hold lone surrogates, which no stream can encode.
    print(printable(text), file=out)


def tree_command(path: Path, *, stdout: TextIO, stderr: TextIO) -> int:
    """``otel-spans tree PATH``: every trace at or below ``PATH`` as an indented
    timeline, earliest first."""
    try:
        _print(tree.render(s for source in trace_sources(path) for s in load_spans(source)), stdout)
    except InputError as e:
        print(f"otel-spans: {e}", file=stderr)
        return 2
    return 0


def _with_progress(spans: Iterator[LoadedSpan], out: TextIO) -> Iterator[LoadedSpan]:
    started = time.perf_counter()
    n = 0
    for n, span in enumerate(spans, 1):
        if n % PROGRESS_EVERY == 0:
            print(f"… {n:,} spans loaded ({time.perf_counter() - started:.1f}s)", file=out)
        yield span
    if n >= PROGRESS_EVERY:
        print(f"… {n:,} spans loaded in {time.perf_counter() - started:.1f}s", file=out)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")[:80] or "workflow"


def report(
    path: Path,
    out_dir: Path | None,
    *,
    stdout: TextIO,
    stderr: TextIO,
    key: str | None = None,
    group: str | None = None,
    each_run: bool = False,
    json_out: Path | None = None,
) -> int:
    """Analyse every workflow of the latest run at or below ``path`` (of each run,
    with ``each_run``), or look up one task ``key`` or ``group`` in it, writing each
    workflow's diagnosis to ``json_out`` as JSON when given; returns the
    process exit code."""
    documents: list[dict[str, object]] = []
    try:
        sources = trace_sources(path)
        runs = find_runs(path) if len(sources) > 1 or each_run else []
    except InputError as e:
        print(f"otel-spans report: {e}", file=stderr)
        return 2
    except OSError as e:
        print(f"otel-spans report: {path}: {e.strerror or e}", file=stderr)
        return 2
    if not sources:
        print(f"otel-spans report: no OTLP/JSON traces files in or below {path}", file=stderr)
        return 1
    if len(sources) == 1 and not each_run:
        # One directory (or file): read once, in full; it may still hold several runs.
        code = _report_source(
            sources[0], None, path, out_dir, stdout, stderr, key, group, set(), documents
        )
        return _write_json(json_out, documents, code)
    if not runs:
        print(f"otel-spans report: no Dask spans in or below {path}", file=stderr)
        return 1
    chosen = runs if each_run else runs[-1:]
    _print(f"found {len(runs)} runs in {path}:", stdout)
    for line in describe(runs):
        _print(line, stdout)
    if not each_run:
        _print(f"reporting the latest, {chosen[0].label} (--each-run: every one)\n", stdout)
    used: set[str] = set()
    code = 0
    for run in chosen:
        code = max(
            code,
            _report_source(
                run.source,
                run.trace_ids,
                run.source,
                out_dir,
                stdout,
                stderr,
                key,
                group,
                used,
                documents,
            ),
        )
    return _write_json(json_out, documents, code)


def _write_json(json_out: Path | None, documents: list[dict[str, object]], code: int) -> int:
    """The diagnoses of the workflows reported, as one JSON document, when asked."""
    if json_out is not None and code == 0:
        json_out.write_text(json.dumps({"workflows": documents}, indent=2), encoding="utf-8")
    return code


def _report_source(
    source: Path,
    traces: frozenset[str] | None,
    path: Path,
    out_dir: Path | None,
    stdout: TextIO,
    stderr: TextIO,
    key: str | None,
    group: str | None,
    used: set[str],
    documents: list[dict[str, object]],
) -> int:
    """The report of one source's runs: of those whose traces are ``traces``, or when
    None, of its latest run (saying so when it holds several)."""
    try:
        spans = list(_with_progress(load_spans(source), stderr))
        activity = load_activity(source)
        profiles = load_profiles(source)
    except InputError as e:
        print(f"otel-spans report: {e}", file=stderr)
        return 2
    except OSError as e:
        print(f"otel-spans report: {source}: {e.strerror or e}", file=stderr)
        return 2
    if traces is None:
        runs = split(source, build_workflows(s for s in spans if is_dask_or_group_span(s)))
        if len(runs) > 1:
            _print(f"found {len(runs)} runs in {source}:", stdout)
            for line in describe(runs):
                _print(line, stdout)
            _print(f"reporting the latest, {runs[-1].label}\n", stdout)
            traces = runs[-1].trace_ids
    if traces is not None:
        spans = [s for s in spans if s.trace_id in traces]
    if key is not None or group is not None:
        found = lookup.render(spans, key=key, group=group)
        if found is None:
            what = f"task {key!r}" if key is not None else f"task group {group!r}"
            hint = (
                " (task runs are sampled: try --group with its prefix)" if key is not None else ""
            )
            print(f"otel-spans report: no span of {what} in {path}{hint}", file=stderr)
            return 1
        _print(found, stdout)
        return 0
    workflows = build_workflows(spans, activity)
    del spans
    if not workflows:
        print(f"otel-spans report: no Dask spans in {path}", file=stderr)
        return 1
    target = out_dir or (source if source.is_dir() else source.parent) / REPORT_DIRECTORY
    target.mkdir(parents=True, exist_ok=True)
    for built in workflows:
        analysis = analyse(built.workflow)
        findings = diagnose.findings(built, analysis)
        documents.append(
            {
                "name": built.workflow.name,
                "trace_id": built.trace_id,
                "wall_s": built.workflow.wall_ns / 1e9,
                "diagnosis": diagnose.as_json(findings),
            }
        )
        hot = profiles.get(built.trace_id, [])
        _print(summary.render(built, analysis, hot, findings), stdout)
        slug = _slug(built.workflow.name)
        if slug in used:
            slug = f"{slug}-{built.trace_id[:8]}"
        used.add(slug)
        trace_file = target / f"{slug}.perfetto.json"
        html_file = target / f"{slug}.html"
        with trace_file.open("w", encoding="utf-8") as f:
            f.writelines(perfetto.stream(built.workflow, analysis, built.spans))
        page = html.render(
            built.workflow,
            analysis,
            built.spans,
            granularity=built.granularity,
            profiles=hot,
            memory_evidence=built.memory,
            findings=findings,
        )
        html_file.write_text(page, encoding="utf-8")
        memory_json = memory.as_json(built.memory)
        if memory_json is not None:
            memory_file = target / f"{slug}.memory.json"
            memory_file.write_text(json.dumps(memory_json, indent=1) + "\n", encoding="utf-8")
            print(f"  wrote {memory_file} (memory by span and task group)", file=stdout)
        print(f"  wrote {trace_file} (open in ui.perfetto.dev) and {html_file}\n", file=stdout)
    return 0
