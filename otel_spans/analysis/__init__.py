"""Why a workflow took as long as it did: pure analysis over a plain model.

:mod:`.model` holds the workflow model (task runs, phases, thread intervals) and
:mod:`.workflow` the analyses (critical path, efficiency, bottlenecks, stragglers).
Used by both :mod:`otel_spans.scheduler` (on a finished root) and
:mod:`otel_spans.report` (offline); imports neither, nor distributed.
"""
