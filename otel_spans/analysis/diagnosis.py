"""Why a workflow was slow: ranked findings from its :class:`~.evidence.Evidence`.

The rules of :mod:`.rules` (one per finding id) claim the wall time through a
:class:`~.ledger.Ledger`, in :data:`~.rules.RULES` order, so the shares of one
workflow add up to at most 1; this module turns their drafts into findings: severity
from the share, the report floor, the rank. The same code runs on the scheduler when a
root is exported and in ``otel-spans report``; thresholds are documented in
docs/telemetry.md (*Diagnosis*).
"""

from __future__ import annotations

from otel_spans.analysis import rules
from otel_spans.analysis.evidence import SPILL_ACTIVITIES, Evidence
from otel_spans.analysis.ledger import Ledger, Rule
from otel_spans.analysis.rules import (
    QUEUEING_EFFICIENCY,
    RULES,
    STRAGGLER_FACTOR,
    STRAGGLER_MIN_TASKS,
    TINY_MIN_TASKS,
    UNDERUTILISED_EFFICIENCY,
)
from otel_spans.records import Finding

#: Shares of wall time: a finding below ``REPORT_SHARE`` is not reported (erred and
#: recomputed tasks always are); ``WARNING_SHARE`` and ``CRITICAL_SHARE`` set severity.
REPORT_SHARE = 0.05
WARNING_SHARE = 0.10
CRITICAL_SHARE = 0.25

CRITICAL, WARNING, INFO = "critical", "warning", "info"
_SEVERITY_RANK = {CRITICAL: 0, WARNING: 1, INFO: 2}


#: Reported whatever their share: a failure or a lost result is news in itself; a
#: task that erred (after any retries) left the workflow without its result. A paused
#: or lost worker, or a workflow that spilled more than it held, ran close to its
#: memory limit: a bigger input may get workers killed, whatever it cost this time.
_ALWAYS = {"erred": CRITICAL, "recomputation": INFO, "memory-pressure": INFO}
#: Waste of the cluster rather than a cause of slowness: at most a warning.
_AT_MOST_WARNING = {"underutilised"}


def severity(share: float) -> str:
    if share >= CRITICAL_SHARE:
        return CRITICAL
    return WARNING if share >= WARNING_SHARE else INFO


def diagnose(evidence: Evidence) -> tuple[Finding, ...]:
    """The findings for ``evidence``, most severe first, then by share. O(groups +
    spans + path steps)."""
    ledger = Ledger(evidence)
    wall = ledger.wall
    findings = []
    for rule in may_apply(evidence):
        draft = rule(evidence, ledger)
        if draft is None:
            continue
        share = draft.seconds / wall if wall > 0 else 0.0
        floor = _ALWAYS.get(draft.id)
        if floor is None and share < REPORT_SHARE:
            continue
        level = severity(share)
        if floor is not None and _SEVERITY_RANK[floor] < _SEVERITY_RANK[level]:
            level = floor
        if draft.id in _AT_MOST_WARNING and level == CRITICAL:
            level = WARNING
        findings.append(
            Finding(
                draft.id,
                level,
                draft.subject,
                draft.subject_kind,
                draft.evidence,
                round(share, 4),
                draft.advice,
            )
        )
    findings.sort(key=lambda f: (_SEVERITY_RANK[f.severity], -f.share, f.id))
    return tuple(findings)


def may_apply(evidence: Evidence) -> list[Rule]:
    """The rules of :data:`~.rules.RULES` that may find something in ``evidence``, in
    order.

    Each rule left out is one whose first tests fail: a necessary condition of its
    finding, read here for all rules in one pass over the groups, so that the
    diagnosis of a quiet workflow (on the scheduler, every finished root) calls only
    the few rules that weigh something. Leaving a rule out changes nothing: a rule
    claims from the ledger only when it finds something."""
    erred = rerun = slow = tiny = moved = False
    for g in evidence.groups:
        erred = erred or bool(g.erred)
        rerun = rerun or g.runs > g.tasks
        tiny = tiny or g.tasks >= TINY_MIN_TASKS
        moved = moved or "transfer" in g.durations
        slowest, typical = g.slowest_s, g.typical_s
        if slowest is None or not typical:
            continue
        if not (g.tasks < STRAGGLER_MIN_TASKS or slowest <= STRAGGLER_FACTOR * typical):
            slow = True
    client = False
    for step in evidence.path.steps:
        client = client or step.client_s > 0
    eff = evidence.efficiency
    # by rule, not by position: a rule missing here fails every diagnosis at once
    applies: dict[Rule, bool] = {
        rules.erred: erred,
        rules.recomputation: rerun,
        rules.straggler: slow,
        rules.tiny_tasks: tiny,
        rules.memory_pressure: bool(
            evidence.pauses or evidence.workers_lost or evidence.spilled_bytes > 0
        ),
        rules.spilling: not evidence.activities.keys().isdisjoint(SPILL_ACTIVITIES),
        rules.data_transfer: moved or not evidence.path.transfer_s <= 0,
        rules.gil_contention: evidence.worker_threads >= 2 and bool(evidence.span_activities),
        rules.client_bound: client,
        rules.queueing: not (eff is None or eff < QUEUEING_EFFICIENCY),
        rules.underutilised: not (
            eff is None or eff >= UNDERUTILISED_EFFICIENCY or evidence.peak_threads < 2
        ),
    }
    return [rule for rule in RULES if applies[rule]]
