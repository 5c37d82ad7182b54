"""``python -m benchmarks.diagnosis`` runs the scheduler's diagnosis over stand-ins for
Dask's spans and groups: they must carry everything ``root_evidence`` reads, or the
benchmark breaks silently when the evidence reads one more attribute."""

from __future__ import annotations

from benchmarks.diagnosis import evidence_of, workflow
from otel_spans.analysis import rules
from otel_spans.analysis.critical_path import critical_path
from otel_spans.analysis.diagnosis import diagnose, may_apply
from otel_spans.analysis.rules import RULES


def test_the_stand_ins_give_the_evidence_the_benchmark_is_designed_with() -> None:
    root, wf, tallies = workflow(10)
    evidence = evidence_of(root, wf, critical_path(wf), tallies)
    # 10 groups, 5 per Dask span; each span's worker metrics by activity
    assert len(evidence.groups) == 10
    assert {g.span for g in evidence.groups} == {"root/stage-0", "root/stage-1"}
    assert set(evidence.span_activities) == {"root/stage-0", "root/stage-1"}
    # every rule weighs something (the diagnosis calls only those: the cost measured),
    # but one of the two on efficiency, which exclude each other
    assert {rule.__name__ for rule in may_apply(evidence)} == {
        rule.__name__ for rule in RULES if rule is not rules.underutilised
    }
    # reported whatever their share: erred runs (every 11th group), recomputed runs
    # (every 7th), the pause
    found = {f.id for f in diagnose(evidence)}
    assert {"erred", "recomputation", "memory-pressure"} <= found, found
