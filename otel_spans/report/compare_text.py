"""``otel-spans report --compare``'s text: a table of rows with their verdicts, per
workflow, and the two critical paths."""

from __future__ import annotations

from collections.abc import Iterable

# compare.NOISE_*, read when rendering: the thresholds the verdicts were given
from otel_spans.report import compare
from otel_spans.report.compare import Comparison, Numbers, changes


def render(comparisons: Iterable[Comparison]) -> str:
    """Every comparison, one block each."""
    return "\n".join(_block(comparison) for comparison in comparisons)


def _block(comparison: Comparison) -> str:
    lines = [
        f"workflow {comparison.workflow!r}: {comparison.wall.verdict}"
        + (
            f" ({comparison.wall.ratio:.2f}× the baseline's wall time)"
            if comparison.wall.ratio
            else ""
        ),
        f"  {'':<11} {'name':<40} {'baseline':>9} {'current':>9}  verdict   tasks, errors, bytes",
        "  (workflow and spans: wall time; task groups: compute time of all their tasks;"
        f" a change within {compare.NOISE_RATIO:.0%} or {compare.NOISE_SECONDS}s is 'same')",
    ]
    for row in comparison.rows:
        b, c = row.baseline, row.current
        lines.append(
            f"  {row.kind:<11} {row.name[:40]:<40} {_side(b):>9} {_side(c):>9}"
            f"  {row.verdict:<8}  {changes(row)}"
        )
    lines.append(f"  critical path, baseline: {' → '.join(comparison.baseline_path[:12])}")
    lines.append(f"  critical path, current:  {' → '.join(comparison.current_path[:12])}")
    return "\n".join(lines)


def _side(n: Numbers | None) -> str:
    return "—" if n is None else f"{n.seconds:8.3f}s"
