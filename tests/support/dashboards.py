"""The PromQL of deploy/: the Grafana dashboards' targets and variables, the alert rules.

Shared by the tests that run those expressions against a real Prometheus (the scraped
scheduler in tests/deploy/test_stack.py, the OTLP-ingested run in
tests/deploy/test_backends.py): one way to find every expression and to fill in
Grafana's template variables the way Grafana does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS_DIR = ROOT / "deploy" / "grafana" / "dashboards"
ALERTS_FILE = ROOT / "deploy" / "prometheus-alerts.yml"

#: ``$var``, ``${var}``, ``${var:fmt}``, ``[[var]]``: Grafana's variable references.
VAR_REF = re.compile(r"\$(\w+)|\$\{(\w+)(?::(\w+))?\}|\[\[(\w+)(?::(\w+))?\]\]")

#: A query variable's ``label_values([selector,] label)``.
LABEL_VALUES = re.compile(
    r"label_values\(\s*(?:(?P<selector>.+?)\s*,\s*)?(?P<label>[a-zA-Z_][a-zA-Z0-9_]*)\s*\)"
)


class PrometheusApi(Protocol):
    """What the variable resolution needs of a server: Prometheus' ``/api/v1`` GET."""

    def api(self, path: str, params: Mapping[str, str] | None = None) -> Any: ...


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS_DIR.glob("*.json"))}


def panels(dashboard: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # collapsed rows
    return out


def variable_query(variable: Mapping[str, Any]) -> str:
    query = variable["query"]
    return str(query["query"] if isinstance(query, dict) else query)


def variable_names(text: str) -> set[str]:
    return {next(g for g in m.groups() if g) for m in VAR_REF.finditer(text)}


def all_exprs() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(dashboard file, panel, target) of every PromQL target (not the LogQL ones)."""
    return [
        (name, panel, target)
        for name, dashboard in dashboards().items()
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
        if "expr" in target and target["datasource"]["type"] == "prometheus"
    ]


def alert_rules() -> list[dict[str, Any]]:
    """Every rule of deploy/prometheus-alerts.yml (alerts and recording rules)."""
    groups = yaml.safe_load(ALERTS_FILE.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def recorded_names() -> set[str]:
    """The series deploy/prometheus-alerts.yml records."""
    return {str(rule["record"]) for rule in alert_rules() if "record" in rule}


def reads_recorded(expr: str) -> str | None:
    """Why an expression has no data in a test's Prometheus: it reads a series the
    alert file records (over 7 days of history), and no test's Prometheus runs those
    rules; ``promtool test rules`` tests them. None for any other expression."""
    found = sorted(expr_metric_names(expr) & recorded_names())
    if not found:
        return None
    return f"reads {', '.join(found)}, recorded by prometheus-alerts.yml (tested by promtool)"


def expr_metric_names(expr: str) -> set[str]:
    return set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr))


def escape_regex(value: str) -> str:
    """A variable value inside a PromQL regex matcher, escaped the way Grafana does."""
    return re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value)


def escape_string(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def label_values(prom: PrometheusApi, query: str) -> list[str]:
    match = LABEL_VALUES.fullmatch(query)
    assert match, query
    params = {"match[]": match["selector"]} if match["selector"] else {}
    return sorted(prom.api(f"label/{match['label']}/values", params))


@dataclass
class Resolved:
    """Template variables with Grafana's default (or chosen) values, and their options."""

    values: dict[str, str | list[str] | None]  # None: "All"
    options: dict[str, list[str]]
    multi: set[str]
    all_value: dict[str, str]

    def interpolate(self, text: str, builtins: Mapping[str, str]) -> str:
        def value(match: re.Match[str]) -> str:
            name = next(g for g in match.groups() if g)
            if name in builtins:
                return builtins[name]
            chosen = self.values[name]
            if name in self.multi:
                if chosen is None:
                    return self.all_value[name]
                items = [escape_regex(v) for v in ([chosen] if isinstance(chosen, str) else chosen)]
                return items[0] if len(items) == 1 else "(" + "|".join(items) + ")"
            assert isinstance(chosen, str), name
            return escape_string(chosen)

        return VAR_REF.sub(value, text)


def resolve_variables(
    prom: PrometheusApi,
    dashboard: Mapping[str, Any],
    builtins: Mapping[str, str],
    chosen: Mapping[str, str] | None = None,
) -> Resolved:
    """Each variable in Grafana's order: its options from Prometheus, then its value
    (``chosen``, else the saved one when it is an option, else the first option)."""
    resolved = Resolved({}, {}, set(), {})
    for variable in dashboard["templating"]["list"]:
        name = variable["name"]
        if variable["type"] == "datasource":
            resolved.values[name] = variable["current"]["value"]
            continue
        assert variable["type"] == "query", name
        query = resolved.interpolate(variable_query(variable), builtins)
        options = label_values(prom, query)
        assert options, f"variable {name}: {query} has no values"
        resolved.options[name] = options
        if variable.get("multi") or variable.get("includeAll"):
            resolved.multi.add(name)
            resolved.all_value[name] = variable["allValue"]
        if chosen and name in chosen:
            assert chosen[name] in options, (name, chosen[name], options)
            resolved.values[name] = chosen[name]
        elif name in resolved.multi and variable["current"]["value"] == ["$__all"]:
            resolved.values[name] = None
        else:
            current = variable["current"].get("value")
            resolved.values[name] = current if current in options else options[0]
    return resolved
