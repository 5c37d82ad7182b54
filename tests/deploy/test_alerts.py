"""deploy/prometheus-alerts.yml: valid rules, unit-tested with Debian's promtool.

``promtool test rules deploy/prometheus-alerts.test.yml`` runs every alert against
series that should and should not fire it; here it also checks that every alert has a
test, and that the rules only use metric names that exist (otel-spans' instruments,
Dask's own /metrics, the collector's self-metrics, Prometheus' ``up``).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.servers.prometheus import PROMTOOL_BINARY
from tests.support.metric_names import expected_metric_names

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus-alerts.yml"
RULE_TESTS = DEPLOY / "prometheus-alerts.test.yml"
PROMETHEUS_FILE = DEPLOY / "prometheus.yml"

#: Dask's own metric names the rules may use (distributed's /metrics: checked against a
#: live scheduler by tests/deploy/test_stack.py's live fixture).
DASK_NATIVE = {"dask_scheduler_workers"}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROMTOOL_BINARY, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=DEPLOY,
    )


def rules() -> list[dict[str, object]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def test_rules_pass_promtool_check() -> None:
    proc = promtool("check", "rules", RULES.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rules_pass_their_unit_tests() -> None:
    proc = promtool("test", "rules", RULE_TESTS.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_prometheus_loads_the_rules() -> None:
    config = yaml.safe_load(PROMETHEUS_FILE.read_text())
    assert config["rule_files"] == [RULES.name]
    assert yaml.safe_load(RULE_TESTS.read_text())["rule_files"] == [RULES.name]


def test_every_alert_is_tested_firing_and_quiet() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    alerts = {str(r["alert"]) for r in rules() if "alert" in r}
    assert alerts == fired, alerts ^ fired
    # Most are also shown not firing before their condition, or resolving after it.
    assert len(quiet) >= len(alerts) // 2, quiet


def test_the_alerts_an_operator_needs_exist() -> None:
    alerts = {str(r["alert"]): str(r["expr"]) for r in rules() if "alert" in r}
    assert "otel-collector" in alerts["OtelCollectorDown"]
    assert "otelcol_exporter_send_failed" in alerts["OtelCollectorExportFailing"]
    assert "otel_spans_records_total" in alerts["OtelSpansRecordsLost"]
    assert 'dask_task_state="erred"' in alerts["DaskTasksErred"]
    assert "quantile_over_time(0.5" in alerts["DaskWorkflowSlow"]
    assert "otel_spans_internal_errors_total" in alerts["OtelSpansInternalErrors"]
    assert "otel_spans_cardinality_overflow_total" in alerts["OtelSpansCardinalityOverflow"]
    assert "otel_spans_hooks_disabled" in alerts["OtelSpansSchedulerNotReporting"]
    for rule in rules():
        if "alert" in rule:
            labels = rule["labels"]
            assert isinstance(labels, dict) and labels["severity"] in {
                "critical",
                "warning",
                "info",
            }
            annotations = rule["annotations"]
            assert isinstance(annotations, dict) and annotations["summary"]


def test_scrape_jobs_the_rules_name_exist() -> None:
    jobs = {j["job_name"] for j in yaml.safe_load(PROMETHEUS_FILE.read_text())["scrape_configs"]}
    named = set(re.findall(r'job="([^"]+)"', RULES.read_text()))
    assert named and named <= jobs, named - jobs


def test_rules_use_known_metric_names() -> None:
    known = expected_metric_names() | DASK_NATIVE | {"up"}
    records = {str(r["record"]) for r in rules() if "record" in r}
    for rule in rules():
        expr = re.sub(r'"[^"]*"', '""', str(rule["expr"]))  # no label values
        expr = re.sub(r"\b(by|on)\s*\([^)]*\)", "", expr)  # no label names
        names = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{|\[| offset|\)|$)", expr))
        names = {n for n in names if "_" in n and not n.startswith("__")}
        functions = {"last_over_time", "quantile_over_time"}
        unknown = names - known - records - functions
        assert not unknown, (rule.get("alert") or rule.get("record"), unknown)


def test_the_history_rules_count_a_first_run_and_judge_against_a_band() -> None:
    """The hourly means count a series that appeared within the hour whole (a
    workflow's first run, which increase() alone misses; the promtool case at 15m
    shows it), and the three history alerts compare them with their 7-day bands."""
    by_name = {str(r.get("alert") or r.get("record")): str(r["expr"]) for r in rules()}
    for record in (
        "dask_workflow:duration_seconds:mean1h",
        "dask_span:duration_seconds:mean1h",
        "dask_workflow:cost:per_run1h",
    ):
        assert "unless dask_span_duration_seconds_count offset 1h" in by_name[record], record
    for alert, upper in (
        ("DaskWorkflowSlowerThanUsual", "dask_workflow:duration_seconds:upper7d"),
        ("DaskStageSlowerThanUsual", "dask_span:duration_seconds:upper7d"),
        ("DaskWorkflowCostAboveUsual", "dask_workflow:cost:upper7d"),
    ):
        assert upper in by_name[alert], alert
        assert "quantile_over_time(0.5" in by_name[upper.replace("upper7d", "median7d")]


# -- one alert per scheduler, for the right reason, with a runbook ---------------------
RUNBOOK = ROOT / "docs" / "runbook.md"
#: The scrape job of the scheduler's own endpoint (deploy/prometheus.yml); the OTLP
#: path's job is the service name.
SCRAPE_JOB = "dask-scheduler"


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the markdown's headings."""
    return {
        re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", markdown, flags=re.M)
    }


def test_every_alert_links_its_own_runbook_section() -> None:
    sections = anchors(RUNBOOK.read_text())
    for rule in rules():
        if "alert" in rule:
            annotations = rule["annotations"]
            assert isinstance(annotations, dict)
            path, _, anchor = str(annotations["runbook_url"]).partition("#")
            assert (ROOT / path) == RUNBOOK, rule["alert"]
            assert anchor == str(rule["alert"]).lower() and anchor in sections, rule["alert"]


def test_records_lost_counts_every_loss_outcome() -> None:
    """Every ``otel_spans.outcome`` but submitted and exported is a loss: the rule
    selects exactly those, as the code and docs/telemetry.md name them."""
    from otel_spans.telemetry.metrics import OUTCOMES

    expr = next(str(r["expr"]) for r in rules() if r.get("alert") == "OtelSpansRecordsLost")
    selected = {
        frozenset(regex.split("|")) for regex in re.findall(r'otel_spans_outcome=~"([^"]+)"', expr)
    }
    losses = frozenset(OUTCOMES) - {"submitted", "exported"}
    assert selected == {losses}
    telemetry = (ROOT / "docs" / "telemetry.md").read_text().splitlines()
    (row,) = [line for line in telemetry if line.startswith("| `otel_spans.outcome`")]
    explained = set(re.findall(r"`([a-z_]+)` \(", row))  # "`dropped` (queue full)"
    assert explained == losses


def test_every_alert_on_otel_spans_metrics_is_tested_fed_both_ways() -> None:
    """Each alert on otel-spans' metrics has a unit test whose series come both pushed
    (OTLP: job = service name) and scraped (job dask-scheduler), and fires once."""
    ours = expected_metric_names() | {str(r["record"]) for r in rules() if "record" in r}
    alerts = {
        str(r["alert"])
        for r in rules()
        if "alert" in r and set(re.findall(r"[a-zA-Z0-9_:]+", str(r["expr"]))) & ours
    }
    assert {"OtelSpansRecordsLost", "DaskTasksErred", "DaskWorkflowSlow"} <= alerts
    fired_once: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        jobs = {
            match
            for series in case["input_series"]
            for match in re.findall(r'\bjob="([^"]+)"', series["series"])
        }
        if SCRAPE_JOB not in jobs or len(jobs) < 2:
            continue
        for check in case.get("alert_rule_test", []):
            if len(check["exp_alerts"]) == 1:
                fired_once.add(check["alertname"])
    assert alerts <= fired_once, alerts - fired_once
