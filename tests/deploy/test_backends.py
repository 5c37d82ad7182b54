"""deploy/collector-config.yaml, verbatim, in front of the real backends the stack names.

The dashboards live in existing tooling: Jaeger (and Tempo) for traces, Prometheus for
metrics, a logs store for logs. Here a real collector runs the deploy config unchanged
(only its env-var endpoints point at loopback ports) and forwards a demo-shaped Dask
run (``tests/support/workload.py``) to Jaeger v2, Prometheus 3 with its native OTLP
receiver (configured as deploy/prometheus.yml configures it) and VictoriaLogs (where
the stack has Loki; a recording OTLP receiver stands in for Tempo, AGPL and not built).
Each backend is asked through its own API what a user would see:

* Jaeger finds one trace per workflow by service, operation and tenant tag, with the
  designed span tree, errors and links, and no warnings (the same workflow spread over
  two workers, with transfers: tests/deploy/test_jaeger_transfers.py);
* every PromQL expression of the Grafana dashboards and of the alert rules returns a
  series for the run, or is listed below with the reason it cannot: in a Prometheus
  configured as deploy/prometheus.yml, and in one left at Prometheus' default OTLP
  translation; a third, under ``translation_strategy: NoTranslation`` (UTF-8 names),
  holds the OTLP names deploy/README.md says, which no dashboard selector names (the
  collector's one metrics endpoint reaches all three through ``OtlpFanout``);
* the erred task's log record carries the ids of the task's span in Jaeger;
* each pipeline reached only its backends.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.servers.backends import backend_binary
from tests.servers.jaeger import JaegerServer
from tests.servers.otelcol import OtelcolServer
from tests.servers.otlp_fanout import OtlpFanout
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.ports import LOOPBACK, wait_until
from tests.servers.prometheus import PrometheusServer
from tests.servers.victorialogs import VictoriaLogs
from tests.support import workload
from tests.support.collector_routing import exporter_counts, routing_violations
from tests.support.dashboards import (
    ALERTS_FILE,
    alert_rules,
    all_exprs,
    dashboards,
    expr_metric_names,
    reads_recorded,
)
from tests.support.dashboards import resolve_variables as resolve
from tests.support.metric_names import expected_metric_names, otel_spans_instruments

ROOT = Path(__file__).resolve().parents[2]
COLLECTOR_FILE = ROOT / "deploy" / "collector-config.yaml"
PROMETHEUS_FILE = ROOT / "deploy" / "prometheus.yml"
#: How long a backend may take to show what was sent, on a busy 2-core machine.
DEADLINE_S = 60.0
#: Grafana's $__rate_interval for samples pushed every 0.5 s (metrics.interval below).
RATE_INTERVAL = "4s"
#: The service otel-spans reports as (its default; Prometheus' job label).
SERVICE = "dask"


#: The translation strategy deploy/prometheus.yml sets, and UTF-8 names.
DEPLOYED, UTF8 = "UnderscoreEscapingWithSuffixes", "NoTranslation"


@dataclass
class Stack:
    jaeger: JaegerServer
    #: Configured as deploy/prometheus.yml (its translation strategy set explicitly).
    prometheus: PrometheusServer
    #: The same without ``translation_strategy``: Prometheus' default.
    prometheus_default: PrometheusServer
    #: ``translation_strategy: NoTranslation``, no rules (they name escaped names).
    prometheus_utf8: PrometheusServer
    fanout: OtlpFanout
    logs: VictoriaLogs
    tempo: OtlpReceiver
    collector: OtelcolServer
    ran: workload.Ran
    started: float


def prometheus_config(strategy: str | None = DEPLOYED) -> dict[str, Any]:
    """deploy/prometheus.yml's OTLP block, storage and rules; no scrapes: what is in it
    came over OTLP. ``strategy`` None leaves Prometheus' default translation; UTF-8
    names get no rules."""
    deployed = yaml.safe_load(PROMETHEUS_FILE.read_text())
    assert deployed["otlp"]["translation_strategy"] == DEPLOYED
    otlp = {k: v for k, v in deployed["otlp"].items() if k != "translation_strategy"}
    if strategy is not None:
        otlp["translation_strategy"] = strategy
    return {
        "otlp": otlp,
        "storage": deployed["storage"],
        "rule_files": [] if strategy == UTF8 else [str(ALERTS_FILE)],
        "scrape_configs": [],
    }


def start_prometheus(
    binary: Path, strategy: str | None, stack: contextlib.ExitStack
) -> PrometheusServer:
    prometheus = PrometheusServer(
        binary=str(binary), scrape_interval="1s", extra_config=prometheus_config(strategy)
    )
    stack.callback(prometheus.close)
    prometheus.start()
    assert prometheus.otlp_supported, prometheus.capabilities
    return prometheus


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    binaries = {n: backend_binary(n) for n in ("otelcol", "jaeger", "prometheus", "victorialogs")}
    with contextlib.ExitStack() as servers:
        jaeger = servers.enter_context(JaegerServer(binaries["jaeger"]))
        proms = [
            start_prometheus(binaries["prometheus"], strategy, servers)
            for strategy in (DEPLOYED, None, UTF8)
        ]
        fanout = servers.enter_context(OtlpFanout([p.otlp_endpoint for p in proms]))
        logs = servers.enter_context(VictoriaLogs(binaries["victorialogs"]))
        tempo = servers.enter_context(OtlpReceiver())
        env = {
            "JAEGER_OTLP_ENDPOINT": jaeger.otlp_grpc_address,
            "TEMPO_OTLP_ENDPOINT": f"{LOOPBACK}:{tempo.grpc_port}",
            "PROMETHEUS_OTLP_ENDPOINT": fanout.endpoint,
            "LOKI_OTLP_ENDPOINT": logs.otlp_endpoint,
        }
        collector = servers.enter_context(OtelcolServer(COLLECTOR_FILE, env))
        started = time.time()
        files = tmp_path_factory.mktemp("otel-spans-files")
        ran = workload.run_on_a_cluster(collector.otlp_grpc_endpoint, files)
        deployed, default, utf8 = proms
        result = Stack(
            jaeger, deployed, default, utf8, fanout, logs, tempo, collector, ran, started
        )
        wait_for_everything(result)
        yield result


def wait_for_everything(stack: Stack) -> None:
    """Until each backend holds the whole run: the trace, the final metrics, the log."""
    ran = stack.ran

    def trace_spans() -> int:
        trace = stack.jaeger.trace(ran.trace_id)
        return len(trace["spans"]) if trace else 0

    wait_until(
        lambda: trace_spans() == workload.SPAN_COUNT,
        timeout=DEADLINE_S,
        interval=0.5,
        message=lambda: (
            f"Jaeger has {trace_spans()} spans of {workload.SPAN_COUNT}\n"
            f"{stack.collector.log_text()[-3000:]}"
        ),
    )
    escaped = f'sum(dask_span_tasks_total{{dask_span_root="{workload.WORKFLOW}"}})'
    utf8 = f'sum({{"dask.span.tasks", "dask.span.root"="{workload.WORKFLOW}"}})'
    final_count = [
        (stack.prometheus, escaped),
        (stack.prometheus_default, escaped),
        (stack.prometheus_utf8, utf8),
    ]
    for prometheus, query in final_count:
        prometheus.wait_for_query(
            query,
            lambda r: bool(r) and float(r[0]["value"][1]) == workload.TASK_COUNT,
            timeout=DEADLINE_S,
        )
    wait_until(
        lambda: erred_records(stack),
        timeout=DEADLINE_S,
        interval=0.5,
        message=lambda: f"no erred-task record in VictoriaLogs: {stack.logs.query('*')[-5:]}",
    )
    # The recording rule and the alerts have been evaluated on the final values.
    after = time.time() + 2
    for prometheus in (stack.prometheus, stack.prometheus_default):
        prometheus.wait_for_query(
            f'timestamp(vector(0)) > {after} and on() count(ALERTS{{alertname="DaskTasksErred"}})',
            timeout=DEADLINE_S,
        )


def erred_records(stack: Stack) -> list[dict[str, Any]]:
    records = stack.logs.query(f'"{workload.ERRED_KEY}"')
    return [r for r in records if r.get("dask.task.key") == workload.ERRED_KEY]


# -- Jaeger -----------------------------------------------------------------------------
def test_jaeger_finds_the_workflow_by_service_operation_and_tenant(stack: Stack) -> None:
    jaeger, trace_id = stack.jaeger, stack.ran.trace_id
    assert jaeger.services() == sorted([SERVICE, workload.CALLER_SERVICE])
    operations = set(jaeger.operations(SERVICE))
    assert {workload.WORKFLOW, "load", "model", "fit", "fragile", "compute"} <= operations
    searches = {
        "service": jaeger.find_traces(SERVICE),
        "operation": jaeger.find_traces(SERVICE, workload.WORKFLOW),
        "tenant": jaeger.find_traces(SERVICE, tags=workload.TENANT),
        "caller": jaeger.find_traces(workload.CALLER_SERVICE, workload.CALLER),
    }
    for how, traces in searches.items():
        assert [t["traceID"] for t in traces] == [trace_id], how  # one trace per workflow
    assert jaeger.find_traces(SERVICE, tags={"tenant": "someone else"}) == []


def jaeger_tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span["tags"]}


def started_by_task_code(span: dict[str, Any]) -> bool:
    return bool(jaeger_tags(span).get("otel.scope.name") == workload.TASK_CODE_SCOPE)


def test_jaeger_shows_the_designed_span_tree(stack: Stack) -> None:
    trace = stack.jaeger.trace(stack.ran.trace_id)
    assert trace is not None
    assert not trace.get("warnings"), trace["warnings"]  # invalid parent, clock skew...
    spans = trace["spans"]
    assert len(spans) == workload.SPAN_COUNT
    warned = [(s["operationName"], s["warnings"]) for s in spans if s.get("warnings")]
    assert warned == []  # every child inside its parent: Jaeger's clock-skew adjuster
    by_id = {s["spanID"]: s for s in spans}
    parent: dict[str, str] = {}
    links: list[tuple[str, str]] = []
    for span in spans:
        for ref in span.get("references") or []:
            assert ref["traceID"] == stack.ran.trace_id
            assert ref["spanID"] in by_id, f"{span['operationName']}: parent not in the trace"
            if ref["refType"] == "CHILD_OF":
                parent[span["spanID"]] = ref["spanID"]
            else:
                links.append((span["operationName"], by_id[ref["spanID"]]["operationName"]))
    (root,) = [s for s in spans if s["spanID"] not in parent]
    assert root["operationName"] == workload.CALLER
    assert root["spanID"] == stack.ran.caller_span_id

    def path(span: dict[str, Any]) -> tuple[str, ...]:
        names = [span["operationName"]]
        while span["spanID"] in parent:
            span = by_id[parent[span["spanID"]]]
            names.append(span["operationName"])
        return tuple(reversed(names))

    paths = sorted(path(s) for s in spans)
    top = (workload.CALLER, workload.WORKFLOW)
    expected = [(workload.CALLER,), top, (*top, "load"), (*top, "model")]
    for stage, groups in workload.GROUPS.items():
        for group in groups:
            runs = {"load": workload.LOADS, "fit": workload.FITS}.get(group, workload.FRAGILES)
            expected.append((*top, stage, group))
            expected += [(*top, stage, group, group)] * runs
            expected += [(*top, stage, group, group, "compute")] * runs
    expected += [(*top, "model", "fit", "fit", *workload.TASK_CODE_SPANS[:n]) for n in (1, 2)]
    assert paths == sorted(expected)
    assert max(len(p) for p in paths) == workload.TREE_DEPTH
    # Task spans sit under their own Dask span (the stage that submitted them).
    for span in spans:
        tags = jaeger_tags(span)
        if "dask.task.key" in tags:
            stage = path(span)[2]
            assert tags["dask.task.key"].split("-")[0] in workload.GROUPS[stage]
        if "dask.span.id" in tags:
            assert tags["tenant"] == workload.TENANT["tenant"], span["operationName"]
    erred = [s for s in spans if jaeger_tags(s).get("error") is True]
    assert len(erred) == workload.ERROR_SPANS
    (task,) = [s for s in erred if "dask.task.key" in jaeger_tags(s)]
    assert jaeger_tags(task)["dask.task.key"] == workload.ERRED_KEY
    assert sorted(path(s)[-1] for s in erred) == sorted(
        [workload.WORKFLOW, "model", "fragile", "fragile"]
    )
    # The fit group depends on the load group: a link Jaeger shows as FOLLOWS_FROM.
    assert links == [("fit", "load")]
    processes = {p["serviceName"] for p in trace["processes"].values()}
    assert processes == {SERVICE, workload.CALLER_SERVICE}


def test_spans_from_task_code_sit_inside_their_task_span_in_jaeger(stack: Stack) -> None:
    """The worker reports its phases shifted by its scheduler_delay; otel-spans undoes
    the shift, so the task span is on the clock the task code's spans use (on one host
    the estimate's error put them a few ms apart, and Jaeger warned on some runs)."""
    trace = stack.jaeger.trace(stack.ran.trace_id)
    assert trace is not None
    mine = [s for s in trace["spans"] if started_by_task_code(s)]
    assert len(mine) == len(workload.TASK_CODE_SPANS)
    # Jaeger's adjuster compares at ns (the API rounds to µs): a warning is the check.
    assert [s["warnings"] for s in mine if s.get("warnings")] == []


# -- Prometheus 3 -----------------------------------------------------------------------
#: Metrics the dashboards and alerts read that never come over OTLP, and why: a run
#: exported by otel-spans cannot give them a series.
NOT_OVER_OTLP = {
    r"\bup\{": "`up` is Prometheus' own per scrape target; nothing is scraped here",
    r"\bdask_scheduler_|\bdask_worker_": "Dask's own /metrics, scraped (dask-*-native jobs)",
    r"otelcol_": "the collector's own metrics, scraped from its :8888 (otel-collector job)",
}
#: Alerts that fire only on a fault this run does not have: each must return no series,
#: and its input without the `> 0` threshold must (at 0).
FAULT_ONLY = {
    "OtelSpansRecordsLost": "fires only when records are lost; the run loses none",
    "OtelSpansInternalErrors": "fires only on otel-spans' internal errors; there are none",
    "OtelSpansCardinalityOverflow": "fires only past the label budget; the run is small",
}
#: Rules that need history a single run cannot give, and why: each must return nothing
#: here (an entry that starts returning a series is stale).
NEED_HISTORY = {
    "DaskWorkflowSlow": "reads the median of the 7 days before the hour",
    **{
        f"{prefix}:{band}": "a band of the 7 days before the hour"
        for prefix in (
            "dask_workflow:duration_seconds",
            "dask_span:duration_seconds",
            "dask_workflow:cost",
        )
        for band in ("median7d", "spread7d", "upper7d")
    },
    "dask_span:runs:changes7d": "counts runs of the 7 days before the hour",
    "dask_workflow:runs:changes7d": "counts runs of the 7 days before the hour",
    "DaskWorkflowSlowerThanUsual": "reads the band of the 7 days before the hour",
    "DaskStageSlowerThanUsual": "reads the band of the 7 days before the hour",
    "DaskWorkflowCostAboveUsual": "reads the band of the 7 days before the hour",
    "OtelSpansSchedulerNotReporting": "fires only once a scheduler that reported has been "
    "silent for 5 minutes; this one still reports",
}


def not_over_otlp(expr: str) -> str | None:
    reasons = [why for pattern, why in NOT_OVER_OTLP.items() if re.search(pattern, expr)]
    return "; ".join(reasons) or None


def builtins_for(stack: Stack) -> dict[str, str]:
    span = math.ceil(time.time() - stack.started) + 10
    return {"__range": f"{span}s", "__rate_interval": RATE_INTERVAL, "__interval": "1s"}


def evaluate(
    prometheus: PrometheusServer, started: float, expr: str, instant: bool
) -> list[list[float]]:
    """Values per series: [value] for an instant query, the points of a range query."""
    if instant:
        return [[float(r["value"][1])] for r in prometheus.query(expr)]
    params = {"query": expr, "start": repr(started - 5), "end": repr(time.time())}
    data = prometheus.api("query_range", {**params, "step": "1"})
    assert data["resultType"] == "matrix"
    return [[float(v) for _, v in r["values"]] for r in data["result"]]


#: The Prometheus servers the dashboards and rules must work on: configured as deployed,
#: and at Prometheus' default OTLP translation (which the deploy file sets explicitly).
ESCAPED = ("deployed", "default")


def escaped(stack: Stack, which: str) -> PrometheusServer:
    return {"deployed": stack.prometheus, "default": stack.prometheus_default}[which]


@pytest.mark.parametrize("which", ESCAPED)
def test_every_dashboard_expression_returns_a_series(stack: Stack, which: str) -> None:
    prometheus = escaped(stack, which)
    builtins = builtins_for(stack)
    empty, evaluated, excused = [], 0, []
    for name, dashboard in dashboards().items():
        resolved = resolve(prometheus, dashboard, builtins)
        assert resolved.values["job"] == SERVICE
        assert resolved.values["service"] == SERVICE
        assert resolved.options["workflow"] == [workload.WORKFLOW]
        for _, panel, target in (e for e in all_exprs() if e[0] == name):
            expr = resolved.interpolate(target["expr"], builtins)
            assert "$" not in expr, expr
            reason = not_over_otlp(expr) or reads_recorded(expr)
            if reason:
                excused.append(f"{panel['title']}: {reason}")
                continue
            evaluated += 1
            series = evaluate(prometheus, stack.started, expr, target["instant"])
            if not any(math.isfinite(v) for values in series for v in values):
                empty.append(f"{panel['title']}: {expr}")
    assert not empty, "\n".join(empty)
    # excused: panels on Dask's own scraped /metrics (the Memory row's worker memory panel
    # among them) and on the 7-day bands only the rules record; 15 as generated
    assert evaluated >= 25 and len(excused) <= 15, (evaluated, excused)


@pytest.mark.parametrize("which", ESCAPED)
def test_alert_rules_evaluate_on_what_came_over_otlp(stack: Stack, which: str) -> None:
    prom = escaped(stack, which)
    for rule in alert_rules():
        name = rule.get("alert") or rule["record"]
        expr = rule["expr"].strip()
        if not_over_otlp(expr):
            continue
        result = prom.query(expr)
        if name in NEED_HISTORY:
            assert result == [], (name, result)
        elif name in FAULT_ONLY:
            assert result == [], (name, result)
            inputs = prom.query(re.sub(r"\)\s*>\s*0$", ")", expr))
            assert inputs and all(float(r["value"][1]) == 0 for r in inputs), (name, inputs)
        elif name == "DaskTasksErred":
            (alert,) = result
            assert alert["metric"]["dask_span_root"] == workload.WORKFLOW
            assert alert["metric"]["dask_task_prefix"] == "fragile"
            assert float(alert["value"][1]) == 1  # the one task that raised
        else:
            assert result, f"{name}: no series for {expr}"
    fired = {r["metric"]["alertname"] for r in prom.query("ALERTS")}
    assert fired == {"DaskTasksErred"}


@pytest.mark.parametrize("which", ESCAPED)
def test_task_counts_and_worker_time_match_the_design(stack: Stack, which: str) -> None:
    prom, root = escaped(stack, which), workload.WORKFLOW
    selector = f'dask_span_tasks_total{{dask_span_root="{root}"}}'
    tasks = prom.query(f"sum by (dask_span_name) ({selector})")
    counts = {r["metric"]["dask_span_name"]: float(r["value"][1]) for r in tasks}
    assert counts == {f"{root}/{stage}": n for stage, n in workload.TASKS.items()}
    erred = prom.query('sum(dask_span_tasks_total{dask_task_state="erred"})')
    assert [float(r["value"][1]) for r in erred] == [stack.ran.erred] == [1]
    busy = prom.query(
        "sum by (dask_span_name) (dask_span_execute_time_seconds_total"
        f'{{dask_span_root="{root}", dask_activity=~"thread-cpu|thread-noncpu"}})'
    )
    seconds = {r["metric"]["dask_span_name"]: float(r["value"][1]) for r in busy}
    assert set(seconds) == {f"{root}/{stage}" for stage in workload.WORKER_SECONDS}
    for stage, designed in workload.WORKER_SECONDS.items():
        # The tasks sleep that long; each may take up to 0.1 s more on a busy machine.
        slack = 0.1 * workload.TASKS[stage]
        assert designed <= seconds[f"{root}/{stage}"] <= designed + slack, (stage, seconds)


def utf8_metric_names() -> set[str]:
    """The series names under NoTranslation: each instrument's OTLP name as it is (a
    histogram's series get Prometheus' classic ``_bucket``, ``_sum``, ``_count``)."""
    names: set[str] = set()
    for kind, name, _ in otel_spans_instruments():
        suffixes = ("_bucket", "_sum", "_count") if kind == "histogram" else ("",)
        names |= {name + suffix for suffix in suffixes}
    return names


def test_utf8_names_are_the_otlp_names_no_dashboard_queries(stack: Stack) -> None:
    """deploy/README.md, Metric names: under ``NoTranslation`` Prometheus keeps the OTLP
    names as they are (no unit or ``_total`` suffix, labels with their dots), so the
    dashboards and alert rules, which name the escaped names, find none of them: they
    need the default strategy."""
    prom, root = stack.prometheus_utf8, workload.WORKFLOW
    names = set(prom.api("label/__name__/values")) - {"target_info"}
    assert {"dask.span.tasks", "dask.span.execute.time"} <= names <= utf8_metric_names()
    assert not names & expected_metric_names()
    selector = f'{{"dask.span.tasks", "dask.span.root"="{root}"}}'
    tasks = prom.query(f'sum by ("dask.span.name") ({selector})')
    counts = {r["metric"]["dask.span.name"]: float(r["value"][1]) for r in tasks}
    assert counts == {f"{root}/{stage}": n for stage, n in workload.TASKS.items()}
    queried: set[str] = set()
    for expr in [t["expr"] for _, _, t in all_exprs()] + [r["expr"] for r in alert_rules()]:
        queried |= expr_metric_names(expr)
    assert len(queried) >= 10, queried
    found = {m for m in queried if prom.query(f'count({{__name__="{m}"}})')}
    assert found == set()
    # The same selectors find the run in the Prometheus configured as deployed.
    assert {"dask_span_tasks_total", "dask_span_execute_time_seconds_total"} <= queried


# -- the logs store ---------------------------------------------------------------------
def test_the_erred_tasks_log_record_points_at_its_span_in_jaeger(stack: Stack) -> None:
    (record,) = erred_records(stack)
    assert record["severity_text"] == "ERROR", record
    assert record["event_name"] == "dask.task.erred"
    assert record["exception.type"] == workload.ERROR
    trace = stack.jaeger.trace(stack.ran.trace_id)
    assert trace is not None
    key = workload.ERRED_KEY
    (task,) = [s for s in trace["spans"] if jaeger_tags(s).get("dask.task.key") == key]
    assert (record["trace_id"], record["span_id"]) == (task["traceID"], task["spanID"])


# -- routing ----------------------------------------------------------------------------
def test_each_signal_reaches_only_its_backends(stack: Stack) -> None:
    counts = exporter_counts(stack.collector.metrics_url)
    assert routing_violations(counts) == []
    # Every span the collector sent is in Jaeger and at the Tempo stand-in, nothing else.
    jaeger_sent = counts["otlp_grpc/jaeger"]["sent"]["spans"]
    assert jaeger_sent == counts["otlp_grpc/tempo"]["sent"]["spans"] == workload.SPAN_COUNT
    assert len(stack.tempo.spans()) == workload.SPAN_COUNT
    assert not stack.tempo.records("metrics") and not stack.tempo.records("logs")

    # The logs store holds exactly the log records sent, all otel-spans' (no spans).
    def sent() -> float:
        return exporter_counts(stack.collector.metrics_url)["otlp_http/loki"]["sent"]["log_records"]

    def all_stored() -> list[dict[str, Any]] | None:
        records = stack.logs.query("*", limit=100_000)
        return records if len(records) == sent() else None

    records = wait_until(
        all_stored,
        timeout=DEADLINE_S,
        message=lambda: f"VictoriaLogs holds {len(stack.logs.query('*'))} of {sent()} records",
    )
    assert {r.get("service.name") for r in records} == {SERVICE}
    # Every metrics request reached each Prometheus, and each took it.
    assert stack.fanout.failures == []
    # Prometheus holds otel-spans' metrics, target_info and the rules' own series only.
    names = set(stack.prometheus.api("label/__name__/values"))
    rules = {r["record"] for r in alert_rules() if "record" in r}
    assert names - {"target_info", "ALERTS", "ALERTS_FOR_STATE"} - rules <= expected_metric_names()


def test_metrics_routed_to_jaeger_would_fail_the_routing_check(
    stack: Stack, tmp_path: Path
) -> None:
    """The check above is real: the deploy config with its metrics pipeline sent to the
    Jaeger exporter, and one metric sent to it, is reported (Jaeger refuses metrics)."""
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    config = yaml.safe_load(COLLECTOR_FILE.read_text())
    config["service"]["pipelines"]["metrics"]["exporters"] = ["otlp_grpc/jaeger"]
    wrong = tmp_path / "collector-config.yaml"
    wrong.write_text(yaml.safe_dump(config))
    env = {"JAEGER_OTLP_ENDPOINT": stack.jaeger.otlp_grpc_address}
    with OtelcolServer(wrong, env) as collector:
        exporter = OTLPMetricExporter(endpoint=collector.otlp_grpc_endpoint, insecure=True)
        reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
        provider = MeterProvider(metric_readers=[reader])
        provider.get_meter("tests.routing").create_counter("probe").add(1)
        provider.shutdown()  # exports what it has

        def reported() -> list[str]:
            counts = exporter_counts(collector.metrics_url)
            return [p for p in routing_violations(counts) if "otlp_grpc/jaeger failed" in p]

        problems = wait_until(reported, timeout=DEADLINE_S, interval=0.5)
    assert problems == ["otlp_grpc/jaeger failed 1 metric_points"]
    assert stack.jaeger.services() == sorted([SERVICE, workload.CALLER_SERVICE])
