"""``benchmarks.per_span``'s table reads the per-span budget's figure from the right
buckets: the loop's per-span work and the exporter threads, not the per-task hooks."""

from __future__ import annotations

from benchmarks import per_span

WORKFLOWS = 300  # 900 Dask spans


def run(per_task: float, per_span_work: float, exporters: float, cpu: float) -> dict[str, object]:
    own = {
        "loop: per-task hooks": per_task,
        "loop: per-span work": per_span_work,
        "loop: collections in otel-spans' calls": 0.0,
        "exporter threads": exporters,
    }
    return {"own": own, "cpu": cpu, "wall": 10.0, "collections": 0.2, "settled": True}


def test_the_per_span_figure_and_its_share_of_dasks_cpu() -> None:
    # Two rounds: 0.09 + 0.045 s and 0.117 + 0.045 s over 900 spans are 150 and 180 µs
    # per span; over the same round's baseline CPU (4.5 s, 5.4 s) both are 3.0 %.
    rounds = [run(0.5, 0.09, 0.045, 5.0), run(0.5, 0.117, 0.045, 6.0)]
    base = [
        {"cpu": 4.5, "wall": 9.9, "collections": 0.19},
        {"cpu": 5.4, "wall": 9.9, "collections": 0.19},
    ]
    table = per_span.report({"baseline": base, "default": rounds}, WORKFLOWS)
    rows = dict(line.rsplit(" | ", 1) for line in table.splitlines() if line.startswith("| "))
    assert rows["| **otel-spans' per-span work and exporters**"] == "**165 [150–180]** |"
    assert rows["| the same, % of the baseline's process CPU (same round)"] == "3.0 [3.0–3.0] |"
