"""Which signal each exporter of deploy/collector-config.yaml sent, from the collector.

The collector counts, per exporter, the items it sent and failed to send of each signal
(``otelcol_exporter_sent_spans``, ``..._metric_points``, ``..._log_records`` and
``otelcol_exporter_send_failed_*``, on its own /metrics). A pipeline that reached a
backend it should not shows there even when the backend drops what it cannot store
(Jaeger answers metrics with Unimplemented; nothing lands, something failed).
"""

from __future__ import annotations

import re
import urllib.request
from collections import defaultdict

SIGNALS = ("spans", "metric_points", "log_records")

#: The one signal each exporter of the deploy config is for.
DESIGNED = {
    "otlp_grpc/jaeger": "spans",
    "otlp_grpc/tempo": "spans",
    "otlp_http/prometheus": "metric_points",
    "otlp_http/loki": "log_records",
}

_SAMPLE = re.compile(
    r"^otelcol_exporter_(?P<what>sent|send_failed)_(?P<signal>spans|metric_points|log_records)"
    r"(?:_total)?\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$",
    re.M,
)

Counts = dict[str, dict[str, dict[str, float]]]


def exporter_counts(metrics_url: str) -> Counts:
    """exporter -> "sent"/"failed" -> signal -> items, summed over label sets."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    counts: Counts = defaultdict(lambda: {"sent": {}, "failed": {}})
    for match in _SAMPLE.finditer(text):
        exporter = re.search(r'exporter="([^"]*)"', match["labels"])
        assert exporter, match[0]
        what = "sent" if match["what"] == "sent" else "failed"
        by_signal = counts[exporter[1]][what]
        by_signal[match["signal"]] = by_signal.get(match["signal"], 0.0) + float(match["value"])
    return dict(counts)


def routing_violations(counts: Counts) -> list[str]:
    """What differs from :data:`DESIGNED`: an exporter that sent (or failed to send) a
    signal not its own, failed any, or sent nothing of its own."""
    problems = []
    for exporter, signal in DESIGNED.items():
        mine = counts.get(exporter, {"sent": {}, "failed": {}})
        if not mine["sent"].get(signal):
            problems.append(f"{exporter} sent no {signal}")
    for exporter, mine in counts.items():
        for what, by_signal in mine.items():
            for signal, items in by_signal.items():
                if items and (what == "failed" or DESIGNED.get(exporter) != signal):
                    problems.append(f"{exporter} {what} {items:g} {signal}")
    return problems
