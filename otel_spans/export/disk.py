"""Bounded, owner-only OTLP/JSON lines files: the disk side of the embedded default.

A scheduler that runs for months with no collector must not fill its disk. Each
process appends one file per signal, ``<signal>-<role>-<pid>.jsonl``; when the next
line would take it past ``directory-max-file-bytes`` it is renamed to
``<signal>-<role>-<pid>.<seq>[.r<records>].jsonl`` (``seq`` counts up, so name order
is write order, and the active file sorts after its rotated ones) and a new one
starts; at close, the active file is set aside the same way. Before every line, the
files of this layout under the directory are summed and the oldest (by modification
time) are deleted until the line fits under ``directory-max-bytes``; what is deleted
is counted (files, bytes, and records where the name or this process knows them).
Files of any other name are never touched.

Every failure to write (a read-only directory, a full disk) is counted and logged at
most once per 30 s per directory, naming the path, without a traceback: the exporter
thread goes on and Dask never sees it. Files are created 0600 and the directory 0700:
they hold exception texts and client code.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from otel_spans.throttle import Throttle

#: ``directory-max-bytes`` default: total of the files under the directory.
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
#: ``directory-max-file-bytes`` default: one file, before it is rotated.
DEFAULT_MAX_FILE_BYTES = 16 * 1024 * 1024
#: At most one "cannot write" warning per directory per this many seconds.
WARN_EVERY = 30.0

#: The signals written to files, each in files of its own.
SIGNALS = ("traces", "metrics", "logs")
#: The files this module writes (and so may delete): signal, then the rest of the name.
_OURS = re.compile(r"^(traces|metrics|logs)-.+\.jsonl$")
#: A rotated file's sequence number and, when known, its record count.
_ROTATED = re.compile(r"\.(\d{8})(?:\.r(\d+))?\.jsonl$")

logger = logging.getLogger("otel_spans")


@dataclass
class SignalCounts:
    """What happened to one signal's lines in one directory, from this process."""

    #: Lines written, and the records (spans, log records, metric points) in them.
    lines: int = 0
    records: int = 0
    bytes: int = 0
    #: Lines (and their records) that could not be written: an OSError, or one line
    #: larger than ``directory-max-bytes``. These records are lost.
    failed_lines: int = 0
    failed_records: int = 0
    #: Files of this signal renamed aside because the next line would not fit.
    rotated: int = 0
    #: Files of this signal deleted to stay under ``directory-max-bytes`` (by any
    #: writer of this process, whoever wrote them), their bytes, and their records
    #: where known (``deleted_unknown``: files whose record count was not known).
    deleted_files: int = 0
    deleted_bytes: int = 0
    deleted_records: int = 0
    deleted_unknown: int = 0


@dataclass
class DiskBudget:
    """The cap of one directory, shared by every writer of this process under it.

    One lock orders the writers' scans, rotations and deletions (they run on
    different exporter threads), so the total holds within this process; another
    process writing there at the same moment can overshoot it by its one line.
    """

    directory: Path
    max_bytes: int
    max_file_bytes: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: By signal: all three from the start, so that readers on other threads never
    #: see the mapping change size.
    counts: dict[str, SignalCounts] = field(
        default_factory=lambda: {signal: SignalCounts() for signal in SIGNALS}
    )
    #: Records in each live writer's active file (None: not known), so a file deleted
    #: while active is counted exactly. At most one entry per writer of this process.
    active: dict[Path, int | None] = field(default_factory=dict)
    #: One "cannot write" warning per window for the whole directory; used under ``lock``.
    warnings: Throttle = field(default_factory=lambda: Throttle(WARN_EVERY))

    def of(self, signal: str) -> SignalCounts:
        return self.counts[signal]

    def stats(self) -> dict[str, object]:
        """Counters for ``otel_spans_stats``: the cap, then a mapping per signal."""
        return {
            "directory": str(self.directory),
            "max_bytes": self.max_bytes,
            "max_file_bytes": self.max_file_bytes,
            **{signal: vars(counts).copy() for signal, counts in sorted(self.counts.items())},
        }

    def warn(self, message: str, *args: object) -> None:
        self.warnings.log(logging.WARNING, message, *args)

    def files(self) -> Iterator[tuple[Path, int, float]]:
        """(path, size, mtime) of each file of ours under the directory."""
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if not _OURS.match(entry.name):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                yield Path(entry.path), st.st_size, st.st_mtime

    def make_room(self, incoming: int, keep: Path) -> bool:
        """Delete the oldest files until ``incoming`` more bytes fit; False if they
        cannot (only ``keep``, the writer's own active file, is never deleted)."""
        found = sorted(self.files(), key=lambda f: (f[2], f[0].name))
        total = sum(size for _, size, _ in found)
        for path, size, _ in found:
            if total + incoming <= self.max_bytes:
                break
            if path == keep:
                continue
            try:
                path.unlink()
            except FileNotFoundError:  # another process deleted it first
                total -= size
                continue
            total -= size
            self._count_deleted(path, size)
        return total + incoming <= self.max_bytes

    def _count_deleted(self, path: Path, size: int) -> None:
        signal = path.name.split("-", 1)[0]
        counts = self.of(signal)
        counts.deleted_files += 1
        counts.deleted_bytes += size
        if path in self.active:  # a live writer's active file: it knows its records
            records = self.active[path]
            self.active[path] = 0
        else:
            rotated = _ROTATED.search(path.name)
            records = int(rotated.group(2)) if rotated and rotated.group(2) else None
        if records is None:
            counts.deleted_unknown += 1
        else:
            counts.deleted_records += records


#: One budget per directory and process, alive while a writer or a reader of its
#: counters holds it: at most one entry per directory in use.
_BUDGETS: weakref.WeakValueDictionary[Path, DiskBudget] = weakref.WeakValueDictionary()
_BUDGETS_LOCK = threading.Lock()


def budget_for(
    directory: Path,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> DiskBudget:
    """The budget of ``directory`` in this process (the first writer's cap wins)."""
    directory = directory.resolve()
    with _BUDGETS_LOCK:
        budget = _BUDGETS.get(directory)
        if budget is None:
            budget = DiskBudget(directory, max_bytes, max_file_bytes)
            _BUDGETS[directory] = budget
        return budget


class JsonLinesWriter:
    """Appends lines to ``<directory>/<signal>-<role>-<pid>.jsonl``, rotated and capped.

    One file per process and signal, so that a scheduler and its workers on one host
    never interleave half-written lines in a shared file. The file is opened for each
    line: a file deleted under a writer (by the cap, or by hand) is simply started
    again.
    """

    def __init__(
        self,
        directory: Path,
        signal: str,
        role: str,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    ):
        self.budget = budget_for(directory, max_bytes, max_file_bytes)
        self.signal = signal
        self.stem = f"{signal}-{role}-{os.getpid()}"
        self.path = self.budget.directory / f"{self.stem}.jsonl"
        self._counts = self.budget.of(signal)
        #: Whether this writer has looked at its active file yet (it may be left by an
        #: earlier process with the same pid, holding records nobody counted).
        self._started = False

    def fresh(self, incoming: int) -> bool:
        """Whether a line of ``incoming`` bytes would start a new file (none yet, an
        empty one, or a rotation): the metrics exporter writes every series then."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return True
        return size == 0 or size + incoming > self.budget.max_file_bytes

    def write(self, line: bytes, records: int) -> bool:
        """Append one line holding ``records`` records; False (counted and logged,
        rate-limited) when it could not be written. Never raises an OSError."""
        budget = self.budget
        counts = self._counts
        with budget.lock:
            try:
                self._write(line, records)
            except OSError as error:
                counts.failed_lines += 1
                counts.failed_records += records
                budget.warn(
                    "otel-spans: cannot write %s: %s; %s records lost so far: %d",
                    self.path,
                    error.strerror or error,
                    self.signal,
                    counts.failed_records,
                )
                return False
        return True

    def _write(self, line: bytes, records: int) -> None:
        budget = self.budget
        budget.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if not self._started:
            self._started = True
            budget.active[self.path] = None if size else 0
        if size == 0:
            budget.active[self.path] = 0  # deleted under us (and counted), or new
        elif size + len(line) > budget.max_file_bytes:
            self._rotate()
            size = 0
        if not budget.make_room(len(line), keep=self.path):
            raise OSError(0, f"one line of {len(line)} bytes is larger than the cap")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            written = 0
            while written < len(line):
                written += os.write(fd, line[written:])
        except OSError:
            # a full disk can take half a line: take it back, so readers see whole lines
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
        finally:
            os.close(fd)
        counts = self._counts
        counts.lines += 1
        counts.records += records
        counts.bytes += len(line)
        known = budget.active.get(self.path)
        budget.active[self.path] = None if known is None else known + records

    def _rotate(self) -> None:
        """Rename the active file aside, named after its sequence and record count."""
        budget = self.budget
        seq = 1 + max(
            (
                int(m.group(1))
                for path, _, _ in budget.files()
                if path.name.startswith(self.stem + ".") and (m := _ROTATED.search(path.name))
            ),
            default=0,
        )
        records = budget.active.get(self.path)
        suffix = "" if records is None else f".r{records}"
        self.path.rename(self.path.with_name(f"{self.stem}.{seq:08d}{suffix}.jsonl"))
        budget.active[self.path] = 0
        self._counts.rotated += 1

    def close(self) -> None:
        """Set the active file aside under its record count, so that whoever deletes
        it later (the next run under this directory) counts its records, and a later
        process with this pid starts a file of its own; then forget it in the budget."""
        budget = self.budget
        with budget.lock:
            try:
                if self.path.stat().st_size:
                    self._rotate()
            except OSError:
                pass  # nothing to set aside, or a directory we cannot write: as it is
            budget.active.pop(self.path, None)
