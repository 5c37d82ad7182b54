"""What Jaeger's query API returns for the demo's trace: the README's transcript.

``python -m tests.servers.jaeger_demo`` starts the Jaeger v2 the project builds
(``tests/backends/build jaeger``), runs ``otel_spans.demo.run_workflow`` on a
LocalCluster of 2 workers with every task span kept (``traces.tasks.mode: all``),
exporting its traces straight to Jaeger, then asks Jaeger for the trace as its UI
does and prints :func:`summary` of it. :func:`summary` is also what
tests/deploy/test_jaeger_transfers.py reads its trace with.
"""

from __future__ import annotations

import urllib.parse
from collections import Counter
from typing import Any

#: The demo's root Dask span (otel_spans.demo.WORKFLOW).
OPERATION = "nightly training"


def summary(trace: dict[str, Any]) -> dict[str, Any]:
    """Span count, depth of the ``CHILD_OF`` tree, error spans, ``FOLLOWS_FROM`` links,
    Jaeger's warnings (on the trace, and how many spans carry one) and spans by name,
    of one trace as ``/api/traces/<id>`` returns it."""
    spans = trace["spans"]
    parent: dict[str, str] = {}
    links = 0
    for span in spans:
        for ref in span.get("references") or []:
            if ref["refType"] == "CHILD_OF":
                parent[span["spanID"]] = ref["spanID"]
            else:
                links += 1

    def depth(span_id: str) -> int:
        n = 1
        while span_id in parent:
            span_id, n = parent[span_id], n + 1
        return n

    errors = [s for s in spans if any(t["key"] == "error" and t["value"] for t in s["tags"])]
    return {
        "spans": len(spans),
        "depth": max(depth(s["spanID"]) for s in spans),
        "errors": len(errors),
        "links": links,
        "trace warnings": trace.get("warnings"),
        "spans with warnings": sum(1 for s in spans if s.get("warnings")),
        "by name": dict(Counter(s["operationName"] for s in spans).most_common()),
    }


def main() -> int:
    import dask.config
    from distributed import Client, LocalCluster

    from otel_spans.demo import run_workflow
    from tests.servers.backends import backend_binary
    from tests.servers.jaeger import JaegerServer
    from tests.servers.ports import wait_until

    with JaegerServer(backend_binary("jaeger")) as jaeger:
        config = {
            "distributed.scheduler.preload": ["otel_spans"],
            "distributed.worker.preload": ["otel_spans"],
            "otel-spans.endpoint": f"http://{jaeger.otlp_grpc_address}",
            "otel-spans.traces.tasks.mode": "all",
            "otel-spans.traces.linger": "200ms",
            "otel-spans.traces.batch-wait": "200ms",
            # Jaeger takes traces only.
            "otel-spans.metrics.exporter": "none",
            "otel-spans.logs.exporter": "none",
        }
        with (
            dask.config.set(config),
            LocalCluster(  # type: ignore[no-untyped-call]
                n_workers=2, threads_per_worker=1, dashboard_address=":0"
            ) as cluster,
            Client(cluster) as client,  # type: ignore[no-untyped-call]
        ):
            run_workflow(client)

            def tracking() -> int:
                stats = client.run_on_scheduler(
                    lambda dask_scheduler: dask_scheduler.plugins["otel-spans"].stats()
                )
                return int(stats["open_spans"]) + int(stats["live_spans"])

            wait_until(lambda: tracking() == 0, timeout=60, interval=0.2)
        # The cluster closed: every span was sent. Until Jaeger holds them all (its
        # count stops growing):
        params = {"service": "dask", "operation": OPERATION, "lookback": "1h"}
        query = f"/api/traces?{urllib.parse.urlencode(params)}"
        counts: list[int] = []

        def settled() -> list[dict[str, Any]] | None:
            found = jaeger.api("/api/traces", params) or []
            counts.append(sum(len(t["spans"]) for t in found))
            return found if len(counts) > 2 and counts[-1] == counts[-3] > 0 else None

        traces = wait_until(settled, timeout=60, interval=0.5)
        print(f"GET {query}: {len(traces)} trace(s)")
        for trace in traces:
            print(f"GET /api/traces/{trace['traceID']}:")
            for key, value in summary(trace).items():
                print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
