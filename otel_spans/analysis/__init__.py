"""Why a workflow took as long as it did: pure analysis over a plain model.

:mod:`.model` holds the workflow model (task runs, phases, thread intervals);
:mod:`.critical_path`, :mod:`.bottlenecks` (and stragglers) and :mod:`.efficiency` (and
activities) one analysis each; :mod:`.workflow` runs them all into one ``Analysis``;
:mod:`.diagnosis` turns :mod:`.evidence` into ranked findings (why it was slow).
Used by both :mod:`otel_spans.scheduler` (on a finished root) and
:mod:`otel_spans.report` (offline); imports neither, nor distributed.
"""
