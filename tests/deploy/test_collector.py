"""collector-config.yaml with a real OpenTelemetry Collector (core, tests/servers/otelcol.py).

* ``otelcol validate`` accepts the config (and rejects a typo: the check is real);
* the collector starts with it and logs no deprecation (current component names);
* end to end: a Dask run with otel-spans sends traces, metrics and logs to that
  collector, which forwards each signal to where the config says (a recording OTLP
  receiver standing in for Jaeger, Tempo, Prometheus and Loki), and serves its own
  metrics under the names the alerts and the dashboard use.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask.config
import pytest
import yaml

from tests.servers.otelcol import OtelcolServer, otelcol_binary, otelcol_validate
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.ports import LOOPBACK, wait_until

ROOT = Path(__file__).resolve().parents[2]
COLLECTOR_FILE = ROOT / "deploy" / "collector-config.yaml"
ALERTS_FILE = ROOT / "deploy" / "prometheus-alerts.yml"
DASHBOARDS_DIR = ROOT / "deploy" / "grafana" / "dashboards"


def test_collector_config_validates_with_a_real_collector() -> None:
    ok, out = otelcol_validate(COLLECTOR_FILE)
    assert ok, out


def test_the_collector_rejects_what_is_wrong(tmp_path: Path) -> None:
    """The validation above means something: a misspelled key fails it."""
    bad = tmp_path / "config.yaml"
    bad.write_text(COLLECTOR_FILE.read_text().replace("flush_timeout:", "flush_timout:", 1))
    ok, out = otelcol_validate(bad)
    assert not ok and "flush_timout" in out, out


def test_the_deprecated_names_are_really_gone(tmp_path: Path) -> None:
    text = COLLECTOR_FILE.read_text()
    config = yaml.safe_load(text)
    exporters = set(config["exporters"])
    assert exporters and all(e.split("/")[0] in {"otlp_grpc", "otlp_http"} for e in exporters)
    assert "batch" not in (config.get("processors") or {}), "batching is done by the exporters"
    for exporter in config["exporters"].values():
        assert "batch" in exporter["sending_queue"]


@pytest.fixture(scope="module")
def backend() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def collector(backend: OtlpReceiver) -> Iterator[OtelcolServer]:
    otelcol_binary()
    grpc, http = f"{LOOPBACK}:{backend.grpc_port}", backend.http_endpoint
    env = {
        "JAEGER_OTLP_ENDPOINT": grpc,
        "TEMPO_OTLP_ENDPOINT": grpc,
        "PROMETHEUS_OTLP_ENDPOINT": http,
        "LOKI_OTLP_ENDPOINT": http,
    }
    server = OtelcolServer(COLLECTOR_FILE, env).start()
    try:
        yield server
    finally:
        server.stop()
        print(f"--- otelcol log ---\n{server.log_text()[-10000:]}")
        server.close()


def test_the_collector_starts_without_deprecation_warnings(collector: OtelcolServer) -> None:
    log = collector.log_text()
    assert "Everything is ready" in log, log[-3000:]
    assert not re.search(r"deprecat", log, re.I), log[-3000:]


def self_metric_names(collector: OtelcolServer) -> set[str]:
    with urllib.request.urlopen(collector.metrics_url, timeout=5) as response:
        text = response.read().decode()
    return set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M))


def erring(x: int) -> int:
    if x == 2:
        raise ValueError("corrupt record")
    return x


@pytest.fixture(scope="module")
def dask_run(collector: OtelcolServer, backend: OtlpReceiver, tmp_path_factory: Any) -> None:
    """A tiny workflow, otel-spans on the scheduler exporting to the collector."""
    from distributed import Client, LocalCluster, span

    config = {
        "distributed.scheduler.preload": ["otel_spans"],
        "otel-spans.endpoint": collector.otlp_grpc_endpoint,
        "otel-spans.metrics.interval": "500ms",
        "otel-spans.traces.linger": "200ms",
        "otel-spans.traces.batch-wait": "200ms",
        "otel-spans.metrics.settle": "500ms",
        "otel-spans.directory": str(tmp_path_factory.mktemp("unused")),
    }
    with (
        dask.config.set(config),
        LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,  # type: ignore[no-untyped-call]
    ):
        with span("collector check"):
            futures = client.map(erring, range(4))
            results = client.gather(futures, errors="skip")
        assert sorted(results) == [0, 1, 3]

        def arrived() -> bool:
            names = {s.name for s in backend.spans()}
            return (
                "collector check" in names
                and bool(backend.logs())
                and bool(backend.records("metrics"))
            )

        wait_until(arrived, timeout=45, interval=0.5, message=lambda: "nothing forwarded yet")


def test_every_signal_goes_where_the_config_sends_it(dask_run: None, backend: OtlpReceiver) -> None:
    spans = [s for s in backend.spans() if s.name == "collector check"]
    # Once to Jaeger and once to Tempo (both stand-ins are the same receiver).
    assert len(spans) == 2
    logs = backend.logs()
    assert any("erred" in str(log.body) for log in logs), [str(lg.body)[:80] for lg in logs]
    assert backend.records("metrics")


def test_self_metrics_have_the_names_the_alerts_and_dashboard_use(
    dask_run: None, collector: OtelcolServer
) -> None:
    def families() -> set[str]:
        return {re.sub(r"_total$", "", n) for n in self_metric_names(collector)}

    wanted = {
        f"otelcol_{what}_{signal}"
        for what in ("receiver_accepted", "receiver_refused", "exporter_sent")
        for signal in ("spans", "metric_points", "log_records")
    }
    wait_until(
        lambda: wanted <= families(),
        timeout=20,
        interval=0.5,
        message=lambda: str(wanted - families()),
    )
    # The rules and panels match these families (with or without _total).
    sources = ALERTS_FILE.read_text()
    sources += "".join(p.read_text() for p in DASHBOARDS_DIR.glob("*.json"))
    for what in ("receiver_accepted", "receiver_refused", "exporter_sent"):
        assert f"otelcol_{what}_" in sources, what
