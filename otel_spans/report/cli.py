"""``otel-spans report PATH``: summary, Perfetto trace and HTML report from OTLP/JSON."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from otel_spans.analysis.workflow import analyse
from otel_spans.report import chrome, html
from otel_spans.report.build import build_workflows
from otel_spans.report.load import (
    InputError,
    LoadedSpan,
    load_activity,
    load_profiles,
    load_spans,
)
from otel_spans.report.lookup import lookup_group, lookup_key
from otel_spans.report.summary import render_summary

#: A progress line every this many spans loaded.
PROGRESS_EVERY = 200_000


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
) -> int:
    """Analyse every workflow in ``path`` (or look up one task ``key`` or ``group``);
    returns the process exit code."""
    try:
        spans = list(_with_progress(load_spans(path), stderr))
        activity = load_activity(path)
        profiles = load_profiles(path)
    except InputError as e:
        print(f"otel-spans report: {e}", file=stderr)
        return 2
    except OSError as e:
        print(f"otel-spans report: {path}: {e.strerror or e}", file=stderr)
        return 2
    if key is not None or group is not None:
        found = lookup_key(spans, key) if key is not None else lookup_group(spans, group or "")
        if found is None:
            what = f"task {key!r}" if key is not None else f"task group {group!r}"
            hint = (
                " (task runs are sampled: try --group with its prefix)" if key is not None else ""
            )
            print(f"otel-spans report: no span of {what} in {path}{hint}", file=stderr)
            return 1
        print(found, file=stdout)
        return 0
    workflows = build_workflows(spans, activity)
    del spans
    if not workflows:
        print(f"otel-spans report: no Dask spans in {path}", file=stderr)
        return 1
    target = out_dir or (path if path.is_dir() else path.parent) / "otel-spans-report"
    target.mkdir(parents=True, exist_ok=True)
    used: set[str] = set()
    for built in workflows:
        analysis = analyse(built.workflow)
        hot = profiles.get(built.trace_id, [])
        print(render_summary(built, analysis, hot), file=stdout)
        slug = _slug(built.workflow.name)
        if slug in used:
            slug = f"{slug}-{built.trace_id[:8]}"
        used.add(slug)
        trace_file = target / f"{slug}.perfetto.json"
        html_file = target / f"{slug}.html"
        chrome.write(trace_file, built.workflow, analysis, built.spans)
        page = html.render(
            built.workflow, analysis, built.spans, granularity=built.granularity, profiles=hot
        )
        html_file.write_text(page, encoding="utf-8")
        print(f"  wrote {trace_file} (open in ui.perfetto.dev) and {html_file}\n", file=stdout)
    return 0


def main(path: str, out_dir: str | None, key: str | None = None, group: str | None = None) -> int:
    return report(
        Path(path),
        Path(out_dir) if out_dir else None,
        stdout=sys.stdout,
        stderr=sys.stderr,
        key=key,
        group=group,
    )
