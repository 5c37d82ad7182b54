"""A workflow against its own past: every row of tonight's run judged on its history.

The rows are those of ``--compare`` (:mod:`.numbers`): the workflow, each Dask span by
its name path, each task group by prefix. For each, the past runs that had it give a
distribution per metric, and tonight's value is judged on it by :func:`robust.judge`
(median and MAD; docs/report.md says how to read it):

- **speed**: wall time of the workflow and its spans, compute time of all of a task
  group's tasks (a group's wall time is mostly waiting for others);
- **cost**: the busy thread-seconds of the row's own tasks, times the price of a CPU
  hour when one is given (docs/telemetry.md, "Cost and efficiency");
- **shape**, apart from speed: a row that is new or gone, a task count outside every
  past run's, more erred tasks than any past run had. A stage that got slower because
  it was given twice the data is a shape change first, and says so.

Pure: samples in, :class:`WorkflowHistory` out; ``history_text``, ``history_html`` and
``history_json`` render it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from otel_spans.report import robust
from otel_spans.report.numbers import Numbers, RowKey
from otel_spans.report.robust import Judgement

#: The least spread of a time in seconds: below it, timing jitter and rounding.
SECONDS_FLOOR = 0.01

#: One run's rows of one workflow: its label and numbers.
Sample = tuple[str, Mapping[RowKey, Numbers]]

_KIND_ORDER = {"workflow": 0, "span": 1, "task group": 2}


@dataclass(frozen=True)
class HistoryRow:
    #: ``workflow``, ``span`` or ``task group``.
    kind: str
    name: str
    #: Each past run's numbers, oldest first; None where the run did not have the row.
    past: tuple[Numbers | None, ...]
    current: Numbers | None
    #: Wall time (workflow, spans) or compute time (task groups), in seconds.
    speed: Judgement
    #: Busy thread-seconds of its own tasks, times the price per CPU hour / 3600 when
    #: one was given.
    cost: Judgement
    #: What changed in its shape; empty when nothing did.
    shape: tuple[str, ...]

    @property
    def regressed(self) -> bool:
        return robust.REGRESSED in (self.speed.verdict, self.cost.verdict)


@dataclass(frozen=True)
class WorkflowHistory:
    workflow: str
    #: The past runs' labels, oldest first.
    past_runs: tuple[str, ...]
    current_run: str
    rows: tuple[HistoryRow, ...]
    #: Price of a CPU hour the cost is in; None: cost in thread-seconds.
    price: float | None = None

    @property
    def regressed(self) -> tuple[HistoryRow, ...]:
        return tuple(r for r in self.rows if r.regressed)

    @property
    def wall(self) -> HistoryRow:
        return self.rows[0]


def _cost(numbers: Numbers, price: float | None) -> float:
    return numbers.busy_s if price is None else numbers.busy_s / 3600 * price


def _shape(kind: str, past: Sequence[Numbers | None], current: Numbers | None) -> tuple[str, ...]:
    present = [n for n in past if n is not None]
    if not present:
        return (f"new: in none of the {len(past)} past runs",)
    if current is None:
        return (f"gone: in {len(present)} of the {len(past)} past runs, not in this one",)
    out = []
    tasks = sorted(n.tasks for n in present)
    if not tasks[0] <= current.tasks <= tasks[-1]:
        usual = f"{tasks[0]:,}" if tasks[0] == tasks[-1] else f"{tasks[0]:,}–{tasks[-1]:,}"
        out.append(f"{current.tasks:,} tasks, past runs {usual}")
    erred = max(n.erred for n in present)
    if current.erred > erred:
        out.append(f"{current.erred:,} erred tasks, past runs at most {erred:,}")
    return tuple(out)


def _kept(past: Sequence[Numbers | None], current: Numbers | None) -> bool:
    """A row absent tonight is reported gone only when it was regular: in the latest
    past run or in at least half of them (a group that ran once last month is not)."""
    if current is not None:
        return True
    present = sum(1 for n in past if n is not None)
    return bool(past) and (past[-1] is not None or 2 * present >= len(past))


def history(
    workflow: str,
    past: Sequence[Sample],
    current: Sample,
    *,
    price: float | None = None,
) -> WorkflowHistory:
    """``current``'s rows judged against ``past`` (oldest first)."""
    keys = set(current[1])
    for _, rows in past:
        keys |= set(rows)
    cost_floor = SECONDS_FLOOR if price is None else SECONDS_FLOOR / 3600 * price
    out = []
    for key in sorted(keys, key=lambda k: (_KIND_ORDER.get(k[0], 3), k[1])):
        values = tuple(rows.get(key) for _, rows in past)
        now = current[1].get(key)
        if not _kept(values, now):
            continue
        present = [n for n in values if n is not None]
        out.append(
            HistoryRow(
                kind=key[0],
                name=key[1],
                past=values,
                current=now,
                speed=robust.judge(
                    [n.seconds for n in present], now.seconds if now else None, SECONDS_FLOOR
                ),
                cost=robust.judge(
                    [_cost(n, price) for n in present],
                    _cost(now, price) if now else None,
                    cost_floor,
                ),
                shape=_shape(key[0], values, now),
            )
        )
    return WorkflowHistory(
        workflow, tuple(label for label, _ in past), current[0], tuple(out), price
    )
