"""``otel-spans report --history``'s text: per workflow, the rows that moved.

Speed, cost and shape are three sections: a stage given twice the data is a shape
change before it is a slow stage. Rows within noise are counted, not listed (the HTML
page and the JSON have every row), unless ``all_rows``: what a nightly job prints names
what moved and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from otel_spans.report import robust
from otel_spans.report.history import HistoryRow, WorkflowHistory
from otel_spans.report.markup import short
from otel_spans.report.robust import Judgement


def render(histories: Iterable[WorkflowHistory], *, all_rows: bool = False) -> str:
    """Every workflow's verdicts, one block each."""
    return "\n".join(_block(h, all_rows) for h in histories)


def _block(h: WorkflowHistory, all_rows: bool) -> str:
    moved = [r.kind + " " + repr(r.name) for r in h.regressed]
    lines = [
        f"workflow {h.workflow!r}: this run against {len(h.past_runs)} past runs"
        f" — {'REGRESSED: ' + ', '.join(moved) if moved else 'nothing regressed'}",
        f"  this run: {h.current_run}",
        "  speed (workflow and spans: wall time; task groups: compute time of all their"
        " tasks; spread: 1.4826 × MAD of the past runs; change in spreads,"
        f" beyond ±{robust.THRESHOLD} is a verdict)",
    ]
    lines += _table(h.rows, lambda r: r.speed, _seconds, all_rows)
    unit = "thread-seconds" if h.price is None else f"at {h.price:g} per CPU hour"
    lines.append(f"  cost (busy time of each row's own tasks, {unit})")
    lines += _table(h.rows, lambda r: r.cost, _amount(h.price), all_rows)
    shapes = [r for r in h.rows if r.shape]
    lines.append("  shape (new or gone rows, task counts, erred tasks)")
    if not shapes:
        lines.append("    unchanged")
    for r in shapes:
        lines.append(f"    {r.kind:<11} {short(r.name, 40):<40} {'; '.join(r.shape)}")
    return "\n".join(lines)


#: How a column's values read.
Format = Callable[[float | None], str]


def _table(
    rows: Iterable[HistoryRow],
    pick: Callable[[HistoryRow], Judgement],
    fmt: Format,
    all_rows: bool,
) -> list[str]:
    shown: list[str] = []
    quiet = {robust.WITHIN_NOISE: 0, robust.FEW_RUNS: 0}
    for r in rows:
        j = pick(r)
        if j.verdict in (robust.NEW, robust.GONE):
            continue  # shape
        if not all_rows and r.kind != "workflow" and j.verdict in quiet:
            quiet[j.verdict] += 1
            continue
        z = "" if j.z is None else f"{j.z:+.1f}"
        shown.append(
            f"    {r.kind:<11} {short(r.name, 40):<40} {fmt(j.median):>9} ±{fmt(j.scale):<9}"
            f" now {fmt(j.current):>9} {z:>7}  {j.verdict:<12} {j.confidence}"
        )
    if quiet[robust.WITHIN_NOISE] or quiet[robust.FEW_RUNS]:
        few = quiet[robust.FEW_RUNS]
        shown.append(
            f"    … {quiet[robust.WITHIN_NOISE]} more rows within noise"
            + (f", {few} with fewer than {robust.MIN_RUNS} past runs" if few else "")
            + " (--all-rows lists them)"
        )
    return shown


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}s"


def _amount(price: float | None) -> Format:
    def fmt(value: float | None) -> str:
        if value is None:
            return "—"
        return f"{value:.3f}s" if price is None else f"{value:.4g}"

    return fmt
