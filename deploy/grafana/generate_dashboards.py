"""Writes the Grafana dashboards of otel-spans to ``deploy/grafana/dashboards/*.json``.

The JSON is generated because every panel carries the same template variables,
selectors and trace links; writing them by hand invites drift. Edit this file and run

    python deploy/grafana/generate_dashboards.py

``tests/deploy/test_stack.py`` fails when the committed JSON differs from what this writes,
and runs every PromQL expression below against a real Prometheus that scraped a real
Dask run of the demo workflow.

Two copies of each dashboard are written: ``dashboards/`` for Grafana's file provisioning
(deploy/grafana/provisioning/, data sources by their provisioned uids) and ``export/``
for *Dashboards -> New -> Import* into any other Grafana, in the format grafana.com
expects: ``__inputs`` (one per data source, chosen at import), ``__requires`` (Grafana
version, data source and panel plugins) and ``${DS_*}`` placeholders.

Totals ("per workflow") sum ``last_over_time(counter[$__range])`` over series rather
than ``increase()``: a Dask span's series appear only once it has work, already at
their first value, and ``increase()`` cannot see that first step; for a batch
workflow the first step is often most of it. The totals are therefore cumulative
since the scheduler started, summed over the schedulers (``instance``) that reported
in the time range. Over-time panels use ``rate(...[$__rate_interval])``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

OUT = Path(__file__).resolve().parent / "dashboards"
EXPORT = Path(__file__).resolve().parent / "export"

#: The Grafana version the dashboards are written for (deploy/docker-compose.yaml).
GRAFANA_VERSION = "12.4.3"

#: Provisioned data sources (deploy/grafana/provisioning/datasources/otel-spans.yaml),
#: through the dashboard's data source variables.
PROMETHEUS = {"type": "prometheus", "uid": "${datasource}"}
LOKI = {"type": "loki", "uid": "${loki}"}

#: Data source variables: name, label, plugin id, provisioned uid, plugin name.
DATASOURCE_VARIABLES = [
    ("datasource", "Prometheus", "prometheus", "prometheus", "Prometheus"),
    ("tempo", "Tempo", "tempo", "tempo", "Tempo"),
    ("jaeger", "Jaeger", "jaeger", "jaeger", "Jaeger"),
    ("loki", "Loki", "loki", "loki", "Loki"),
]

#: The collector's self-metrics, with or without the ``_total`` suffix (collector
#: builds differ), as a ``__name__`` matcher.
COLLECTOR_SIGNALS = ("spans", "metric_points", "log_records")


def collector_metric(name: str, signal: str) -> str:
    """A matcher for one self-metric of the collector, with or without ``_total``.

    One signal at a time: ``rate()`` drops the name, and two signals of one receiver
    would otherwise collide.
    """
    return f'{{__name__=~"otelcol_{name}_{signal}(_total)?"}}'


# -- selectors shared by the panels -------------------------------------------------------
JOB = 'job="$job"'
WORKFLOW = 'dask_span_root="$workflow"'
SPAN = 'dask_span_name=~"$span"'
PREFIX = 'dask_task_prefix=~"$prefix"'
ROOT_SPAN = 'dask_span_name="$workflow"'
COMPUTE = 'dask_activity=~"thread-cpu|thread-noncpu"'
NOT_IDLE = 'dask_activity!="idle or other spans"'


def sel(metric: str, *matchers: str) -> str:
    return f"{metric}{{{', '.join(matchers)}}}"


def total(metric: str, *matchers: str, by: str = "") -> str:
    """Sum of the series' last values in the time range (see the module docstring)."""
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (last_over_time({sel(metric, *matchers)}[$__range]))"


def rate(metric: str, *matchers: str, by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({sel(metric, *matchers)}[$__rate_interval]))"


# -- trace links --------------------------------------------------------------------------
_PLACEHOLDER = re.compile(r"\$\{[^}]+\}")


def _encode(text: str) -> str:
    """Percent-encode ``text`` but keep ``${...}`` for Grafana to interpolate."""
    out, last = [], 0
    for match in _PLACEHOLDER.finditer(text):
        out.append(quote(text[last : match.start()], safe=""))
        out.append(match.group(0))
        last = match.end()
    out.append(quote(text[last:], safe=""))
    return "".join(out)


def explore_url(datasource_var: str, datasource_type: str, query: dict[str, Any]) -> str:
    """A Grafana Explore URL running ``query`` on the data source ``$datasource_var``."""
    uid = "${" + datasource_var + "}"
    pane = {
        "datasource": uid,
        "queries": [{"refId": "A", "datasource": {"type": datasource_type, "uid": uid}, **query}],
        "range": {"from": "${__from}", "to": "${__to}"},
    }
    panes = json.dumps({"traces": pane}, separators=(",", ":"))
    return "/explore?schemaVersion=1&orgId=1&panes=" + _encode(panes)


def trace_links(errors_only: bool = False) -> list[dict[str, Any]]:
    """Links to the traces of the selected workflow: root span = the workflow's name."""
    service, workflow = "${service:percentencode}", "${workflow:percentencode}"
    status = " && status=error" if errors_only else ""
    traceql = f'{{resource.service.name="{service}" && name="{workflow}"{status}}}'
    tempo = {"queryType": "traceql", "query": traceql, "tableType": "traces", "limit": 20}
    jaeger = {"queryType": "search", "service": service, "operation": workflow}
    if errors_only:
        jaeger["tags"] = "error=true"
    what = "Failed traces" if errors_only else "Traces"
    return [
        {"title": f"{what} of ${{workflow}} in Tempo", "url": explore_url("tempo", "tempo", tempo)},
        {
            "title": f"{what} of ${{workflow}} in Jaeger",
            "url": explore_url("jaeger", "jaeger", jaeger),
        },
    ]


# -- panels -------------------------------------------------------------------------------
def target(
    expr: str,
    ref: str = "A",
    *,
    instant: bool,
    legend: str = "",
    table: bool = False,
    exemplar: bool = False,
) -> dict[str, Any]:
    return {
        "refId": ref,
        "datasource": PROMETHEUS,
        "expr": expr,
        "instant": instant,
        "range": not instant,
        "format": "table" if table else "time_series",
        "legendFormat": legend or "__auto",
        "exemplar": exemplar,
    }


class Layout:
    """Places panels left to right, wrapping at Grafana's 24 columns."""

    def __init__(self) -> None:
        self.x = self.y = self.row_height = 0
        self.next_id = 1
        self.panels: list[dict[str, Any]] = []

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def row(self, title: str) -> None:
        if self.x:
            self.y += self.row_height
        self.panels.append(
            {
                "type": "row",
                "id": self._id(),
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
                "panels": [],
            }
        )
        self.x, self.y, self.row_height = 0, self.y + 1, 0

    def add(
        self,
        kind: str,
        title: str,
        description: str,
        targets: list[dict[str, Any]],
        *,
        w: int,
        h: int,
        unit: str = "short",
        options: dict[str, Any] | None = None,
        custom: dict[str, Any] | None = None,
        errors_only: bool = False,
        red_above_zero: bool = False,
        extra: dict[str, Any] | None = None,
        datasource: dict[str, str] = PROMETHEUS,
    ) -> None:
        if self.x + w > 24:
            self.x, self.y, self.row_height = 0, self.y + self.row_height, 0
        defaults: dict[str, Any] = {
            "unit": unit,
            "links": trace_links(errors_only),
            "color": {"mode": "palette-classic" if kind == "timeseries" else "thresholds"},
            "thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None}]},
        }
        if red_above_zero:
            defaults["thresholds"] = RED_ABOVE_ZERO
            defaults["noValue"] = "0"
        if custom:
            defaults["custom"] = custom
        panel = {
            "type": kind,
            "id": self._id(),
            "title": title,
            "description": description,
            "datasource": datasource,
            "gridPos": {"h": h, "w": w, "x": self.x, "y": self.y},
            "targets": targets,
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": options or {},
            **(extra or {}),
        }
        self.panels.append(panel)
        self.x += w
        self.row_height = max(self.row_height, h)


def stat_options() -> dict[str, Any]:
    return {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "value",
        "graphMode": "none",
        "justifyMode": "auto",
        "textMode": "auto",
        "orientation": "auto",
    }


def bar_options() -> dict[str, Any]:
    return {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "orientation": "horizontal",
        "displayMode": "gradient",
        "showUnfilled": True,
    }


def timeseries_options() -> dict[str, Any]:
    return {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }


STACKED = {"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 30, "lineWidth": 1}
RED_ABOVE_ZERO = {
    "mode": "absolute",
    "steps": [{"color": "green", "value": None}, {"color": "red", "value": 1}],
}


# -- template variables -------------------------------------------------------------------
def datasource_variable(name: str, label: str, kind: str, uid: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "datasource",
        "query": kind,
        "current": {"selected": False, "text": uid, "value": uid},
        "hide": 0,
        "refresh": 1,
        "regex": "",
        "options": [],
    }


def query_variable(
    name: str,
    label: str,
    query: str,
    description: str,
    *,
    multi: bool = False,
    current: str | None = None,
) -> dict[str, Any]:
    variable: dict[str, Any] = {
        "name": name,
        "label": label,
        "description": description,
        "type": "query",
        "datasource": PROMETHEUS,
        "definition": query,
        "query": {
            "qryType": 1,
            "query": query,
            "refId": "PrometheusVariableQueryEditor-VariableQuery",
        },
        "refresh": 2,
        "sort": 1,
        "regex": "",
        "hide": 0,
        "multi": multi,
        "includeAll": multi,
        "options": [],
    }
    if multi:
        variable["allValue"] = ".*"
        variable["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
    elif current is not None:
        variable["current"] = {"selected": False, "text": current, "value": current}
    else:
        variable["current"] = {}
    return variable


def variables() -> list[dict[str, Any]]:
    return [
        *(
            datasource_variable(n, label, kind, uid)
            for n, label, kind, uid, _ in DATASOURCE_VARIABLES
        ),
        query_variable(
            "job",
            "Metrics source (job)",
            "label_values(otel_spans_records_total, job)",
            "Where the metrics come from: the OTLP-ingested series have job = the"
            " service.name (dask), the scraped ones job = the scrape job"
            " (dask-scheduler). Both carry the same numbers; one at a time, so nothing"
            " is counted twice.",
            current="dask",
        ),
        query_variable(
            "service",
            "Service",
            'label_values(otel_spans_records_total{job="$job"}, service_name)',
            "service.name of the Dask cluster: what the trace links search for.",
        ),
        query_variable(
            "workflow",
            "Workflow",
            'label_values(dask_span_tasks_total{job="$job"}, dask_span_root)',
            "The root span (first tag of distributed.span): one trace per run.",
        ),
        query_variable(
            "span",
            "Span",
            'label_values(dask_span_tasks_total{job="$job", dask_span_root="$workflow"},'
            " dask_span_name)",
            "Spans of the workflow, as their tags joined with /.",
            multi=True,
        ),
        query_variable(
            "prefix",
            "Task prefix",
            'label_values(dask_span_tasks_total{job="$job", dask_span_root="$workflow",'
            ' dask_span_name=~"$span"}, dask_task_prefix)',
            "Task prefixes (the function names of the tasks) in the selected spans.",
            multi=True,
        ),
    ]


# -- the rows of the workflows dashboard, top to bottom ----------------------------------
STAT, BAR, TIMESERIES, TABLE = "stat", "bargauge", "timeseries", "table"
#: Selectors of the panels that follow the Span (and Task prefix) variables.
SPAN_SEL = (JOB, WORKFLOW, SPAN)
TASK_SEL = (JOB, WORKFLOW, SPAN, PREFIX)


def workflow_row(lay: Layout) -> None:
    """The workflow at a glance: wall time, runs, efficiency, cost, tasks, errors, output."""
    lay.row("Workflow $workflow")
    workflow_time_stats(lay)
    workflow_count_stats(lay)
    workflow_history_panel(lay)


def hourly_mean(metric: str, *matchers: str) -> str:
    """What a counter gained in the last hour, summed per workflow: a series that
    appeared within the hour counts whole (``increase()`` misses its first step)."""
    series = sel(metric, *matchers)
    return (
        f"sum by (dask_span_root) (({series} unless {series} offset 1h) or increase({series}[1h]))"
    )


def workflow_history_panel(lay: Layout) -> None:
    """The workflow's run times against the band of its own last 7 days."""
    band = (JOB, WORKFLOW)
    median = sel("dask_workflow:duration_seconds:median7d", *band)
    upper = sel("dask_workflow:duration_seconds:upper7d", *band)
    lay.add(
        TIMESERIES,
        "Run time against its last 7 days",
        "Mean wall time of the workflow's runs of the last hour (the rule"
        " dask_workflow:duration_seconds:mean1h, computed here from the histogram),"
        " against the band of its own last 7 days, recorded by prometheus-alerts.yml:"
        " the median of those hourly means and the band's top, median + 3.5 spreads"
        " (interquartile range / 1.349, at least 10 % of the median). Above the top for"
        " 5 minutes: the alert DaskWorkflowSlowerThanUsual; which stage moved:"
        " DaskStageSlowerThanUsual, or otel-spans report --history.",
        [
            target(
                hourly_mean("dask_span_duration_seconds_sum", JOB, WORKFLOW, ROOT_SPAN)
                + " / ("
                + hourly_mean("dask_span_duration_seconds_count", JOB, WORKFLOW, ROOT_SPAN)
                + " > 0)",
                instant=False,
                legend="runs of the last hour (mean)",
            ),
            target(
                f"max by (dask_span_root) ({median})",
                "B",
                instant=False,
                legend="median of 7 days",
            ),
            target(
                f"max by (dask_span_root) ({upper})",
                "C",
                instant=False,
                legend="band top: median + 3.5 spreads",
            ),
        ],
        w=24,
        h=8,
        unit="s",
        options=timeseries_options(),
        custom={"lineWidth": 2, "fillOpacity": 0, "spanNulls": False},
    )


def workflow_time_stats(lay: Layout) -> None:
    """How long and how well: mean wall time, runs, parallel efficiency, cost."""
    lay.add(
        STAT,
        "Wall time (mean per run)",
        "Wall time of the workflow's root span, from the dask.span.duration histogram:"
        " its sum over its count, i.e. the mean over the runs in the time range.",
        [
            target(
                total("dask_span_duration_seconds_sum", JOB, WORKFLOW, ROOT_SPAN)
                + " / "
                + total("dask_span_duration_seconds_count", JOB, WORKFLOW, ROOT_SPAN),
                instant=True,
            )
        ],
        w=4,
        h=4,
        unit="s",
        options=stat_options(),
    )
    lay.add(
        STAT,
        "Runs",
        "Finished runs of the workflow (dask.span.duration count of the root span).",
        [
            target(
                total("dask_span_duration_seconds_count", JOB, WORKFLOW, ROOT_SPAN),
                instant=True,
            )
        ],
        w=3,
        h=4,
        options=stat_options(),
    )
    lay.add(
        STAT,
        "Parallel efficiency",
        "Busy over offered thread-seconds (docs/telemetry.md, Efficiency): the worker"
        " time of the workflow's tasks (every activity but 'idle or other spans') over"
        " that plus its idle share, which Dask reports on the root span. The same"
        " number as the root span's dask.workflow.efficiency and the report's.",
        [
            target(
                total("dask_span_execute_time_seconds_total", JOB, WORKFLOW, NOT_IDLE)
                + " / "
                + total("dask_span_execute_time_seconds_total", JOB, WORKFLOW),
                instant=True,
            )
        ],
        w=4,
        h=4,
        unit="percentunit",
        options=stat_options(),
    )
    lay.add(
        STAT,
        "Cost",
        "dask.span.cost summed over the workflow's spans: the thread-hours its tasks"
        " used times otel-spans.metrics.cpu-hour-price (empty when no price is set)."
        " Idle threads are the cluster's cost, not the workflow's (row Cluster).",
        [target(total("dask_span_cost_total", JOB, WORKFLOW), instant=True)],
        w=3,
        h=4,
        unit="currencyUSD",
        options=stat_options(),
    )


def workflow_count_stats(lay: Layout) -> None:
    """What the workflow did: tasks, erred tasks, output bytes."""
    lay.add(
        STAT,
        "Tasks",
        "Tasks of the workflow that reached a final state (memory or erred).",
        [target(total("dask_span_tasks_total", JOB, WORKFLOW), instant=True)],
        w=3,
        h=4,
        options=stat_options(),
    )
    lay.add(
        STAT,
        "Erred tasks",
        "Tasks that ended in state erred, including those erred because a dependency"
        " did. The links open the failed traces.",
        [
            target(
                total("dask_span_tasks_total", JOB, WORKFLOW, 'dask_task_state="erred"'),
                instant=True,
            )
        ],
        w=3,
        h=4,
        options=stat_options(),
        errors_only=True,
        red_above_zero=True,
    )
    lay.add(
        STAT,
        "Output",
        "Bytes of task outputs the workflow produced (dask.span.output).",
        [target(total("dask_span_output_bytes_total", JOB, WORKFLOW), instant=True)],
        w=4,
        h=4,
        unit="bytes",
        options=stat_options(),
    )


def running_now_row(lay: Layout) -> None:
    """What runs now, from the gauges of spans not exported yet (any workflow of the job)."""
    lay.row("Running now")
    lay.add(
        TIMESERIES,
        "Tasks of running spans, by state",
        "Every Dask span not exported yet (dask.span.open.tasks, read every metrics"
        " interval): its own tasks by current state, summed per workflow. A span's"
        " series end when it is exported, so this row shows what runs now, for every"
        " workflow of the job.",
        [
            target(
                f"sum by (dask_span_root, dask_task_state) ({sel('dask_span_open_tasks', JOB)})",
                instant=False,
                legend="{{dask_span_root}} {{dask_task_state}}",
            )
        ],
        w=14,
        h=7,
        unit="short",
        options=timeseries_options(),
        custom=STACKED,
    )
    lay.add(
        TIMESERIES,
        "Running spans: time since they started",
        "dask.span.open.elapsed of every running Dask span; a line ends when its span is exported.",
        [
            target(
                f"max by (dask_span_name) ({sel('dask_span_open_elapsed_seconds', JOB)})",
                instant=False,
                legend="{{dask_span_name}}",
            )
        ],
        w=10,
        h=7,
        unit="s",
        options=timeseries_options(),
    )


def spans_row(lay: Layout) -> None:
    """One table row per Dask span of the workflow, its own figures side by side."""
    lay.row("Spans")
    lay.add(
        TABLE,
        "Spans of $workflow",
        "Wall time and CPU made available are the span's own (children overlap it);"
        " compute time, tasks, output and cost count the span's own tasks, not its"
        " children's.",
        [
            target(
                total("dask_span_duration_seconds_sum", *SPAN_SEL, by="dask_span_name")
                + " / "
                + total("dask_span_duration_seconds_count", *SPAN_SEL, by="dask_span_name"),
                "A",
                instant=True,
                table=True,
            ),
            target(
                total("dask_span_cpu_available_seconds_total", *SPAN_SEL, by="dask_span_name"),
                "B",
                instant=True,
                table=True,
            ),
            target(
                total(
                    "dask_span_execute_time_seconds_total",
                    *SPAN_SEL,
                    COMPUTE,
                    by="dask_span_name",
                ),
                "C",
                instant=True,
                table=True,
            ),
            target(
                total("dask_span_tasks_total", *SPAN_SEL, by="dask_span_name"),
                "D",
                instant=True,
                table=True,
            ),
            target(
                total("dask_span_output_bytes_total", *SPAN_SEL, by="dask_span_name"),
                "E",
                instant=True,
                table=True,
            ),
            target(
                total("dask_span_cost_total", *SPAN_SEL, by="dask_span_name"),
                "F",
                instant=True,
                table=True,
            ),
        ],
        w=24,
        h=8,
        options={"showHeader": True, "sortBy": [{"displayName": "Wall time", "desc": True}]},
        extra={
            "transformations": [
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True},
                        "renameByName": {
                            "dask_span_name": "Span",
                            "Value #A": "Wall time",
                            "Value #B": "CPU available",
                            "Value #C": "Compute time",
                            "Value #D": "Tasks",
                            "Value #E": "Output",
                            "Value #F": "Cost",
                        },
                    },
                },
            ],
        },
    )


def time_row(lay: Layout) -> None:
    """Worker time by activity and prefix, and task duration percentiles."""
    lay.row("Where the time goes")
    worker_time_panels(lay)
    task_duration_panels(lay)


def worker_time_panels(lay: Layout) -> None:
    """Worker time by activity and by prefix: where the threads' time went."""
    lay.add(
        TIMESERIES,
        "Worker time by activity",
        "Thread-seconds per second the workers spent on the selected spans and"
        " prefixes, by activity (Dask's fine performance metrics): thread-cpu and"
        " thread-noncpu are the tasks themselves, the rest is overhead around them.",
        [
            target(
                rate("dask_span_execute_time_seconds_total", *TASK_SEL, by="dask_activity"),
                instant=False,
                legend="{{dask_activity}}",
            )
        ],
        w=12,
        h=8,
        unit="short",
        options=timeseries_options(),
        custom=STACKED,
    )
    lay.add(
        BAR,
        "Top bottlenecks: worker time by prefix",
        "The 10 task prefixes that took the most worker time (every activity but the"
        " workflow's idle share), in the selected spans.",
        [
            target(
                "topk(10, "
                + total(
                    "dask_span_execute_time_seconds_total",
                    *TASK_SEL,
                    NOT_IDLE,
                    by="dask_task_prefix",
                )
                + ")",
                instant=True,
                legend="{{dask_task_prefix}}",
            )
        ],
        w=12,
        h=8,
        unit="s",
        options=bar_options(),
    )
    lay.add(
        TABLE,
        "Time by activity, per span and prefix",
        "Worker time of each span's own tasks by prefix and activity; the root span's"
        " 'idle or other spans' row is the thread time nobody in the workflow used.",
        [
            target(
                total(
                    "dask_span_execute_time_seconds_total",
                    *TASK_SEL,
                    by="dask_span_name, dask_task_prefix, dask_activity",
                ),
                instant=True,
                table=True,
            )
        ],
        w=12,
        h=9,
        options={"showHeader": True, "sortBy": [{"displayName": "Value", "desc": True}]},
        extra={
            "transformations": [
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True},
                        "renameByName": {
                            "dask_span_name": "Span",
                            "dask_task_prefix": "Prefix",
                            "dask_activity": "Activity",
                            "Value": "Seconds",
                        },
                    },
                }
            ]
        },
    )


def task_duration_panels(lay: Layout) -> None:
    """Task compute time percentiles by prefix, over time and over the whole range."""
    lay.add(
        TIMESERIES,
        "Task duration p95 by prefix (exemplars: traces)",
        "95th percentile of task compute time (dask.task.duration). With the OTLP"
        " source, the dots are exemplars: click one for the trace of its span.",
        [
            target(
                "histogram_quantile(0.95, "
                + rate("dask_task_duration_seconds_bucket", *TASK_SEL, by="le, dask_task_prefix")
                + ")",
                instant=False,
                legend="{{dask_task_prefix}}",
                exemplar=True,
            )
        ],
        w=12,
        h=9,
        unit="s",
        options=timeseries_options(),
    )
    lay.add(
        BAR,
        "Task duration p95 by prefix, whole range",
        "95th percentile of the compute time of every task of the prefix in the"
        " selected spans, from the cumulative dask.task.duration histogram.",
        [
            target(
                "histogram_quantile(0.95, "
                + total("dask_task_duration_seconds_bucket", *TASK_SEL, by="le, dask_task_prefix")
                + ")",
                instant=True,
                legend="{{dask_task_prefix}}",
            )
        ],
        w=24,
        h=7,
        unit="s",
        options=bar_options(),
    )


def tasks_row(lay: Layout) -> None:
    """Task counts by state, output bytes, erred tasks and the log panel."""
    lay.row("Tasks, data and errors")
    task_count_panels(lay)
    events_panel(lay)


def task_count_panels(lay: Layout) -> None:
    """Tasks by state and prefix, output bytes, and where tasks erred."""
    lay.add(
        TIMESERIES,
        "Tasks finished per second, by state",
        "Tasks reaching memory (computed) or erred, per second.",
        [
            target(
                rate("dask_span_tasks_total", *TASK_SEL, by="dask_task_state"),
                instant=False,
                legend="{{dask_task_state}}",
            )
        ],
        w=8,
        h=8,
        unit="short",
        options=timeseries_options(),
        custom=STACKED,
    )
    lay.add(
        BAR,
        "Tasks by prefix and state",
        "Tasks of each prefix by final state, in the selected spans.",
        [
            target(
                total("dask_span_tasks_total", *TASK_SEL, by="dask_task_prefix, dask_task_state"),
                instant=True,
                legend="{{dask_task_prefix}} {{dask_task_state}}",
            )
        ],
        w=8,
        h=8,
        options=bar_options(),
    )
    lay.add(
        BAR,
        "Output bytes by prefix",
        "Bytes of task outputs by prefix (dask.span.output), in the selected spans.",
        [
            target(
                total("dask_span_output_bytes_total", *TASK_SEL, by="dask_task_prefix"),
                instant=True,
                legend="{{dask_task_prefix}}",
            )
        ],
        w=8,
        h=8,
        unit="bytes",
        options=bar_options(),
    )
    lay.add(
        TABLE,
        "Errors: erred tasks by span and prefix",
        "Where tasks failed. The links open the traces with status error; the span"
        " status says how many of its tasks erred.",
        [
            target(
                total(
                    "dask_span_tasks_total",
                    *TASK_SEL,
                    'dask_task_state="erred"',
                    by="dask_span_name, dask_task_prefix",
                ),
                instant=True,
                table=True,
            )
        ],
        w=12,
        h=7,
        options={"showHeader": True},
        errors_only=True,
        extra={
            "transformations": [
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True},
                        "renameByName": {
                            "dask_span_name": "Span",
                            "dask_task_prefix": "Prefix",
                            "Value": "Erred tasks",
                        },
                    },
                }
            ]
        },
    )
    lay.add(
        TIMESERIES,
        "Output bytes per second, by span",
        "Bytes of task outputs produced per second.",
        [
            target(
                rate("dask_span_output_bytes_total", *TASK_SEL, by="dask_span_name"),
                instant=False,
                legend="{{dask_span_name}}",
            )
        ],
        w=12,
        h=7,
        unit="Bps",
        options=timeseries_options(),
        custom=STACKED,
    )


def events_panel(lay: Layout) -> None:
    """otel-spans' log records from Loki, linked to their traces."""
    lay.add(
        "logs",
        "Events and errors",
        "otel-spans' log records in Loki: Dask's structured events (workers joining and"
        " leaving, client events...) and one ERROR record per erred task with the"
        " exception. Records that belong to a task or span open their trace (Trace in"
        " Tempo).",
        [
            {
                "refId": "A",
                "datasource": LOKI,
                "expr": '{service_name="$service"}',
                "queryType": "range",
            }
        ],
        w=24,
        h=9,
        datasource=LOKI,
        options={
            "showTime": True,
            "wrapLogMessage": True,
            "sortOrder": "Descending",
            "enableLogDetails": True,
            "dedupStrategy": "none",
        },
    )


def memory_row(lay: Layout) -> None:
    """What the selected spans held, spilled, paused and lost, beside the cluster's
    memory over the same time (docs/telemetry.md, Memory)."""
    lay.row("Memory")
    lay.add(
        TIMESERIES,
        "Results held by span",
        "dask.span.memory.held: bytes of results of each span's own tasks held on the"
        " cluster (spilled ones included), while the span is live.",
        [
            target(
                "sum by (dask_span_name) (" + sel("dask_span_memory_held_bytes", *SPAN_SEL) + ")",
                instant=False,
                legend="{{dask_span_name}}",
            )
        ],
        w=12,
        h=8,
        unit="bytes",
        options=timeseries_options(),
        custom=STACKED,
    )
    lay.add(
        TIMESERIES,
        "Cluster memory by type",
        "dask.cluster.memory: the workers' managed (results in RAM), unmanaged and spilled"
        " (results on disk) bytes, summed; per worker in the next panel.",
        [
            target(
                "sum by (dask_memory_type) (" + sel("dask_cluster_memory_bytes", JOB) + ")",
                instant=False,
                legend="{{dask_memory_type}}",
            )
        ],
        w=12,
        h=8,
        unit="bytes",
        options=timeseries_options(),
        custom=STACKED,
    )
    lay.add(
        BAR,
        "Most held at once, by span",
        "The largest dask.span.memory.held reading of each span in the time range.",
        [
            target(
                "max by (dask_span_name) (max_over_time("
                + sel("dask_span_memory_held_bytes", *SPAN_SEL)
                + "[$__range]))",
                instant=True,
                legend="{{dask_span_name}}",
            )
        ],
        w=6,
        h=8,
        unit="bytes",
        options=bar_options(),
    )
    lay.add(
        BAR,
        "Spilled to disk, by span",
        "dask.span.memory.spilled: bytes the span's own tasks pushed to disk while storing"
        " their results (above distributed.worker.memory.target).",
        [
            target(
                total("dask_span_memory_spilled_bytes_total", *SPAN_SEL, by="dask_span_name"),
                instant=True,
                legend="{{dask_span_name}}",
            )
        ],
        w=6,
        h=8,
        unit="bytes",
        options=bar_options(),
    )
    lay.add(
        BAR,
        "Worker pauses and losses, by span",
        "dask.span.memory.pauses (worker memory pauses that overlapped the span's tasks)"
        " and dask.span.memory.workers_lost (workers that died running or holding them:"
        " the dask.worker.lost log records say which tasks, groups and memory).",
        [
            target(
                total("dask_span_memory_pauses_total", *SPAN_SEL, by="dask_span_name"),
                instant=True,
                legend="{{dask_span_name}} pauses",
            ),
            target(
                total("dask_span_memory_workers_lost_total", *SPAN_SEL, by="dask_span_name"),
                "B",
                instant=True,
                legend="{{dask_span_name}} workers lost",
            ),
        ],
        w=6,
        h=8,
        options=bar_options(),
    )
    lay.add(
        TIMESERIES,
        "Memory per worker",
        "dask.worker.memory by worker and type, and each worker's memory limit"
        " (dask.worker.memory_limit); at most metrics.max-workers workers, then (overflow).",
        [
            target(
                sel("dask_worker_memory_bytes", JOB),
                instant=False,
                legend="{{dask_worker_address}} {{dask_memory_type}}",
            ),
            target(
                sel("dask_worker_memory_limit_bytes", JOB),
                "B",
                instant=False,
                legend="{{dask_worker_address}} limit",
            ),
        ],
        w=6,
        h=8,
        unit="bytes",
        options=timeseries_options(),
    )


def cluster_row(lay: Layout) -> None:
    """The whole cluster: Dask's own metrics, utilisation, cost by share, the collector."""
    lay.row("Cluster")
    cluster_time_panels(lay)
    dask_metrics_panels(lay)
    collector_panels(lay)


def cluster_time_panels(lay: Layout) -> None:
    """Worker time, utilisation and cost of the whole cluster, in or outside spans."""
    lay.add(
        TIMESERIES,
        "Worker time by context and activity, whole cluster",
        "dask.cluster.time: everything the workers did, in or outside spans"
        " (execute, gather-dep, get-data, ...).",
        [
            target(
                rate("dask_cluster_time_seconds_total", JOB, by="dask_context, dask_activity"),
                instant=False,
                legend="{{dask_context}} {{dask_activity}}",
            )
        ],
        w=24,
        h=7,
        options=timeseries_options(),
        custom=STACKED,
    )
    lay.add(
        TIMESERIES,
        "Cluster utilisation",
        "Share of the thread-seconds the workers offered that Dask spans' tasks used:"
        " 1 - dask.cluster.cpu.idle / dask.cluster.cpu.available (docs/telemetry.md,"
        " Efficiency). Per workflow, see Parallel efficiency.",
        [
            target(
                "1 - "
                + rate("dask_cluster_cpu_idle_seconds_total", JOB)
                + " / "
                + rate("dask_cluster_cpu_available_seconds_total", JOB),
                instant=False,
                legend="utilisation",
            )
        ],
        w=8,
        h=7,
        unit="percentunit",
        options=timeseries_options(),
    )
    lay.add(
        TIMESERIES,
        "Cluster cost by share",
        "dask.cluster.cost per hour: the workflows' share is the sum of every"
        " dask.span.cost, idle the thread time no task used; together they are what the"
        " cluster's threads cost (empty when no price is set).",
        [
            target(
                "3600 * " + rate("dask_cluster_cost_total", JOB, by="dask_cost_share"),
                instant=False,
                legend="{{dask_cost_share}}",
            )
        ],
        w=8,
        h=7,
        options=timeseries_options(),
        custom=STACKED,
    )


def dask_metrics_panels(lay: Layout) -> None:
    """Dask's own /metrics, scraped by Prometheus: workers, threads, tasks, memory."""
    lay.add(
        TIMESERIES,
        "Workers and threads (Dask's own metrics)",
        "From the scheduler's and the workers' own /metrics (distributed), scraped by"
        " Prometheus: workers connected to each scheduler, and their threads.",
        [
            target(
                "sum by (instance) (dask_scheduler_workers)",
                instant=False,
                legend="workers {{instance}}",
            ),
            target("sum (dask_worker_threads)", "B", instant=False, legend="threads"),
        ],
        w=8,
        h=7,
        options=timeseries_options(),
    )
    lay.add(
        TIMESERIES,
        "Scheduler tasks by state (Dask's own metrics)",
        "Tasks the schedulers hold, by state (dask_scheduler_tasks).",
        [
            target(
                "sum by (state) (dask_scheduler_tasks)",
                instant=False,
                legend="{{state}}",
            )
        ],
        w=8,
        h=7,
        options=timeseries_options(),
        custom=STACKED,
    )
    lay.add(
        TIMESERIES,
        "Worker memory (Dask's own metrics)",
        "Memory of all workers by kind: managed (in memory), unmanaged, spilled.",
        [
            target(
                "sum by (type) (dask_worker_memory_bytes)",
                instant=False,
                legend="{{type}}",
            )
        ],
        w=8,
        h=7,
        unit="bytes",
        options=timeseries_options(),
        custom=STACKED,
    )


def collector_panels(lay: Layout) -> None:
    """The OpenTelemetry Collector's own metrics: items in, out, failed or refused."""
    lay.add(
        TIMESERIES,
        "Collector: items in and out per second",
        "The OpenTelemetry Collector's own metrics: spans, metric points and log"
        " records accepted by its receivers and sent by its exporters.",
        [
            *(
                target(
                    f"sum by (receiver) (rate({collector_metric('receiver_accepted', s)}"
                    "[$__rate_interval]))",
                    "ABC"[i],
                    instant=False,
                    legend=f"in {s} {{{{receiver}}}}",
                )
                for i, s in enumerate(COLLECTOR_SIGNALS)
            ),
            *(
                target(
                    f"sum by (exporter) (rate({collector_metric('exporter_sent', s)}"
                    "[$__rate_interval]))",
                    "DEF"[i],
                    instant=False,
                    legend=f"out {s} {{{{exporter}}}}",
                )
                for i, s in enumerate(COLLECTOR_SIGNALS)
            ),
        ],
        w=12,
        h=7,
        options=timeseries_options(),
    )
    lay.add(
        STAT,
        "Collector: items failed or refused",
        "Items the collector's exporters gave up on (backend down) or its receivers"
        " refused (memory limit), in the time range; should stay 0.",
        [
            target(
                " + ".join(
                    f"(sum (last_over_time({collector_metric(name, s)}[$__range])) or vector(0))"
                    for name in ("exporter_send_failed", "receiver_refused")
                    for s in COLLECTOR_SIGNALS
                ),
                instant=True,
            )
        ],
        w=12,
        h=7,
        options=stat_options(),
        red_above_zero=True,
    )


def health_row(lay: Layout) -> None:
    """otel-spans' own counters: records by outcome, losses, overflow, errors."""
    lay.row("otel-spans health")
    lay.add(
        TIMESERIES,
        "Telemetry records per second, by signal and outcome",
        "otel_spans.records: submitted, exported, dropped (queue full), failed"
        " (collector down or refusing) and unsent (left at shutdown).",
        [
            target(
                rate(
                    "otel_spans_records_total",
                    JOB,
                    by="otel_spans_signal, otel_spans_outcome",
                ),
                instant=False,
                legend="{{otel_spans_signal}} {{otel_spans_outcome}}",
            )
        ],
        w=12,
        h=6,
        options=timeseries_options(),
    )
    lay.add(
        STAT,
        "Records lost",
        "Records otel-spans dropped, failed to export or left unsent; anything above"
        " 0 means gaps in traces or metrics.",
        [
            target(
                total(
                    "otel_spans_records_total",
                    JOB,
                    'otel_spans_outcome=~"dropped|failed|unsent"',
                ),
                instant=True,
            )
        ],
        w=4,
        h=6,
        options=stat_options(),
        red_above_zero=True,
    )
    lay.add(
        STAT,
        "Cardinality overflow",
        "Span names and prefixes reported as (overflow) because the budget"
        " (metrics.max-span-names, max-prefixes) was spent.",
        [
            target(
                total("otel_spans_cardinality_overflow_total", JOB, by="otel_spans_attribute"),
                instant=True,
                legend="{{otel_spans_attribute}}",
            )
        ],
        w=4,
        h=6,
        options=stat_options(),
        red_above_zero=True,
    )
    lay.add(
        STAT,
        "Internal errors",
        "Errors inside otel-spans caught before they reached Dask; should stay 0.",
        [target(total("otel_spans_internal_errors_total", JOB), instant=True)],
        w=4,
        h=6,
        options=stat_options(),
        red_above_zero=True,
    )


#: Row builders in dashboard order; each appends its row and panels to the layout.
WORKFLOW_ROWS = (
    workflow_row,
    running_now_row,
    spans_row,
    time_row,
    tasks_row,
    memory_row,
    cluster_row,
    health_row,
)


# -- the dashboard ------------------------------------------------------------------------
def workflows_dashboard() -> dict[str, Any]:
    lay = Layout()
    for build_row in WORKFLOW_ROWS:
        build_row(lay)
    return {
        "uid": "otel-spans-workflows",
        "title": "Dask workflows (otel-spans)",
        "description": "Per-workflow wall time, efficiency, cost, tasks, bytes, errors and"
        " bottlenecks of Dask spans exported by otel-spans, with links to their traces.",
        "tags": ["dask", "otel-spans", "opentelemetry"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "links": [
            {
                "title": "Jaeger UI",
                "type": "link",
                "url": "http://localhost:16686/search?service=${service:percentencode}",
                "targetBlank": True,
                "icon": "external link",
                "tooltip": "Jaeger's own UI (deploy/docker-compose.yaml publishes it)",
            }
        ],
        "annotations": {"list": []},
        "templating": {"list": variables()},
        "panels": lay.panels,
    }


DASHBOARDS = {"dask-workflows.json": workflows_dashboard}


def panel_types(dashboard: dict[str, Any]) -> set[str]:
    types = set()
    for panel in dashboard["panels"]:
        types.add(panel["type"])
        types |= {p["type"] for p in panel.get("panels", [])}
    return types - {"row"}


def export(dashboard: dict[str, Any]) -> dict[str, Any]:
    """The dashboard as Grafana's "Export for sharing externally" writes it.

    Each data source variable defaults to a ``${DS_*}`` input that Grafana's import
    asks for (and replaces everywhere), so the panels, which use the variables, get
    the importer's data sources.
    """
    dashboard = json.loads(json.dumps(dashboard))
    inputs = []
    chosen = {}
    for name, label, kind, _uid, plugin_name in DATASOURCE_VARIABLES:
        placeholder = f"DS_{label.upper()}"
        inputs.append(
            {
                "name": placeholder,
                "label": label,
                "description": f"{label} data source of the dashboard's ${name} variable",
                "type": "datasource",
                "pluginId": kind,
                "pluginName": plugin_name,
            }
        )
        chosen[name] = "${" + placeholder + "}"
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "datasource":
            value = chosen[variable["name"]]
            variable["current"] = {"selected": False, "text": value, "value": value}
    requires = [{"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_VERSION}]
    requires += [
        {"type": "datasource", "id": kind, "name": plugin_name, "version": "1.0.0"}
        for _, _, kind, _, plugin_name in DATASOURCE_VARIABLES
    ]
    requires += [
        {"type": "panel", "id": kind, "name": kind, "version": ""}
        for kind in sorted(panel_types(dashboard))
    ]
    return {
        "__inputs": inputs,
        "__elements": {},
        "__requires": requires,
        "id": None,
        **dashboard,
    }


def render(build: Any) -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def render_export(build: Any) -> str:
    return json.dumps(export(build()), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    EXPORT.mkdir(parents=True, exist_ok=True)
    for name, build in DASHBOARDS.items():
        (OUT / name).write_text(render(build))
        print(f"wrote {OUT / name}")
        (EXPORT / name).write_text(render_export(build))
        print(f"wrote {EXPORT / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
