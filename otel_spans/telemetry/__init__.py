"""Records to OTel signals: spans, metrics and log records. Never imports distributed.

:class:`~otel_spans.telemetry.signals.Signals` is the one object the scheduler side
talks to; it turns records into spans (:mod:`.traces`), metric points (:mod:`.metrics`,
:mod:`.histogram`, under the budget of :mod:`.cardinality`) and log records
(:mod:`.logs`), and hands them to :mod:`otel_spans.export`. Python's logging reaches
the logs pipeline through :mod:`.python_logs`, on the scheduler and on workers.
"""
