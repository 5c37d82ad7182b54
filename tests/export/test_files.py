"""The embedded default's files: rotation under a cap, changed series only, failures
counted and logged once per window, owner-only modes, and the report reading it all."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_spans import throttle
from otel_spans.config import ExportTarget
from otel_spans.export.disk import budget_for
from otel_spans.export.files import OtlpJsonMetricExporter, budget_of, to_otlp_json, writer_for
from otel_spans.export.sdk import temporality_preference
from otel_spans.report.load import load_activity, load_spans
from tests.support.senders import request, sender_for


def line_bytes(name: str) -> int:
    """Bytes of one written line holding the one-span request ``request(name)``."""
    return len(to_otlp_json(ExportTraceServiceRequest.FromString(request(name)))) + 1


def file_target(directory: Path, max_bytes: int, max_file_bytes: int) -> ExportTarget:
    return ExportTarget(
        kind="file",
        directory=directory,
        directory_max_bytes=max_bytes,
        directory_max_file_bytes=max_file_bytes,
    )


def total_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir())


def test_rotation_keeps_the_total_under_the_cap_and_counts_what_it_deletes(
    tmp_path: Path,
) -> None:
    """Ten one-span lines of L bytes, files of 2 L, a cap of 5 L.

    By design: lines 1-2 fill file 1, line 3 rotates it (R1) and starts the next; from
    line 6 on, every even line needs the oldest rotated file deleted to fit. So 4
    rotations (R1-R4), 3 deletions (R1-R3: 6 lines, 6 spans, 6 L bytes), and what stays
    is R4 (lines 7-8) and the active file (lines 9-10): 4 L, never more than 5 L.
    """
    names = [f"span-{i:02d}" for i in range(10)]
    size = line_bytes(names[0])
    assert {line_bytes(n) for n in names} == {size}  # every line the same length
    directory = tmp_path / "data"
    sender = sender_for(file_target(directory, 5 * size, 2 * size))
    for name in names:
        assert sender.send(request(name))
        assert total_bytes(directory) <= 5 * size

    counts = budget_for(directory).counts["traces"]
    assert (counts.lines, counts.records, counts.rotated) == (10, 10, 4)
    assert (counts.deleted_files, counts.deleted_records, counts.deleted_bytes) == (3, 6, 6 * size)
    assert (counts.deleted_unknown, counts.failed_lines) == (0, 0)
    assert total_bytes(directory) == 4 * size
    rotated = sorted(p.name for p in directory.glob("traces-t-*.*.jsonl"))
    assert rotated == [f"traces-t-{os.getpid()}.00000004.r2.jsonl"]
    # the report reads the rotated file and the active one: the last four spans
    assert sorted(s.name for s in load_spans(directory)) == names[6:]
    sender.shutdown()


def test_files_and_directory_are_owner_only(tmp_path: Path) -> None:
    """Even under umask 0: the directory 0700, every file 0600, rotated ones too."""
    size = line_bytes("a")
    directory = tmp_path / "private"
    old = os.umask(0)
    try:
        sender = sender_for(file_target(directory, 10 * size, 2 * size))
        for _ in range(3):  # the third line rotates the first file
            assert sender.send(request("a"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()}
    assert len(modes) == 2  # one rotated file, one active
    assert set(modes.values()) == {0o600}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The throttle's clock, driven by the test."""
    now = [1000.0]
    monkeypatch.setattr(throttle, "time", SimpleNamespace(monotonic=lambda: now[0]))
    yield now


def unwritable(tmp_path: Path, how: str) -> Path:
    """A data directory that cannot take a line: ``read-only`` (mode 0500), ``full``
    (every write fails with ENOSPC, the active file being /dev/full) or
    ``not-a-directory`` (its parent is a regular file, so it can never be created)."""
    if how == "read-only":
        directory = tmp_path / "data"
        directory.mkdir(mode=0o500)
        return directory
    if how == "full":
        directory = tmp_path / "data"
        directory.mkdir()
        (directory / f"traces-t-{os.getpid()}.jsonl").symlink_to("/dev/full")
        return directory
    (tmp_path / "a-file").write_text("")
    return tmp_path / "a-file" / "data"


@contextlib.contextmanager
def without_root(how: str) -> Iterator[None]:
    """Root writes through mode 0500, so a read-only directory is only read-only to
    another user: as root, the writes run with the effective uid of ``nobody`` (the real
    uid stays 0, so the test can switch back)."""
    if how != "read-only" or os.geteuid() != 0:
        yield
        return
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)


@pytest.mark.parametrize("how", ["read-only", "full", "not-a-directory"])
def test_an_unwritable_directory_warns_once_per_window_and_counts_every_record(
    tmp_path: Path, how: str, clock: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    directory = unwritable(tmp_path, how)
    caplog.set_level(logging.WARNING, logger="otel_spans")
    traces = sender_for(file_target(directory, 1 << 20, 1 << 16))
    with without_root(how):
        for _ in range(5):  # 5 one-span requests within one 30 s window
            assert not traces.send(request())
            clock[0] += 1
        clock[0] += 30
        for _ in range(3):  # the next window: 3 more
            assert not traces.send(request())
            clock[0] += 1
    counts = budget_for(directory).counts
    warnings = [r for r in caplog.records if r.name == "otel_spans"]
    assert len(warnings) == 2  # one per window
    assert not any(r.exc_info for r in warnings)  # no traceback
    assert all(str(directory.resolve()) in r.getMessage() for r in warnings)
    assert "(4 more since the last one)" in warnings[1].getMessage()
    assert (counts["traces"].failed_lines, counts["traces"].failed_records) == (8, 8)
    assert counts["traces"].lines == 0
    traces.shutdown()


def metrics_setup(
    directory: Path, max_bytes: int, max_file_bytes: int
) -> tuple[OtlpJsonMetricExporter, InMemoryMetricReader, MeterProvider]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    target = file_target(directory, max_bytes, max_file_bytes)
    exporter = OtlpJsonMetricExporter(
        writer_for(target, "metrics", "t"), temporality_preference("cumulative")
    )
    return exporter, reader, provider


def export_once(exporter: OtlpJsonMetricExporter, reader: InMemoryMetricReader) -> None:
    data = reader.get_metrics_data()
    assert data is not None
    exporter.export(data)


def test_an_idle_reading_writes_zero_bytes_and_a_change_writes_its_series_alone(
    tmp_path: Path,
) -> None:
    """Five series written once; four idle collections: 0 bytes; one series grows: a
    line with exactly that one point."""
    directory = tmp_path / "data"
    exporter, reader, provider = metrics_setup(directory, 1 << 20, 1 << 18)
    counter = provider.get_meter("t").create_counter("work")
    for i in range(5):
        counter.add(1, {"i": i})
    export_once(exporter, reader)
    (file,) = directory.glob("metrics-t-*.jsonl")
    after_first = file.stat().st_size
    for _ in range(4):
        export_once(exporter, reader)
    assert file.stat().st_size == after_first
    counter.add(1, {"i": 3})
    export_once(exporter, reader)
    counts = budget_for(directory).counts["metrics"]
    assert (counts.lines, counts.records) == (2, 5 + 1)
    provider.shutdown()


def test_the_report_reads_a_rotated_capped_set_with_the_latest_values(tmp_path: Path) -> None:
    """Workflow "wf": activity "steady" is 7 s from the first collection on and never
    changes; "busy" grows by 1 s per collection, 40 collections. The files are small
    and capped, so the early files (the only ones where "steady" changed) are deleted:
    every new file starts with all series, and the report still says 7 and 40."""
    directory = tmp_path / "data"
    exporter, reader, provider = metrics_setup(directory, 8 * 1024, 2 * 1024)
    counter = provider.get_meter("t").create_counter("dask.span.execute.time", unit="s")
    counter.add(7.0, {"dask.span.root": "wf", "dask.activity": "steady"})
    for _ in range(40):
        counter.add(1.0, {"dask.span.root": "wf", "dask.activity": "busy"})
        export_once(exporter, reader)
        assert total_bytes(directory) <= 8 * 1024
    counts = budget_of(file_target(directory, 8 * 1024, 2 * 1024)).counts["metrics"]
    assert counts.rotated >= 1 and counts.deleted_files >= 1  # the set is rotated and capped
    assert counts.deleted_unknown == 0 and counts.failed_lines == 0
    assert load_activity(directory) == {"wf": {"steady": 7.0, "busy": 40.0}}
    provider.shutdown()
