"""Parsers of the structured values: mappings, lists, task rules, log levels, templates.

The scalar parsers are in :mod:`.parsers`; these follow the same calling convention.
A null or empty value of a list or mapping setting means "empty", as it always has.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from otel_spans import redact
from otel_spans.config.parsers import Parser, Shown, Text, fail, warn_ignored
from otel_spans.records import workflow_attributes
from otel_spans.settings import (
    MAX_ATTRIBUTE_LABELS,
    PYTHON_LOG_LEVELS,
    TASK_MODES,
    TaskRule,
    format_trace_url,
)


@dataclass(frozen=True)
class StringMap(Parser):
    """String keys to string values; as ``OTEL_*_HEADERS`` (``k=v,k2=v2``, values
    URL-decoded) they are parsed by :func:`otel_spans.redact.parse_headers`."""

    allowed: str = "a mapping of string keys to string values"
    #: Values are secrets (headers): an error names the key and header only, and each
    #: header must be one HTTP and gRPC can send.
    secret: bool = False

    def __call__(self, key: str, value: Any) -> dict[str, str]:
        value = value or {}
        if self.secret:
            return self._headers(key, value)
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str | int | float | bool) for k, v in value.items()
        ):
            raise fail(key, value, self.allowed)
        return {k: str(v) for k, v in value.items()}

    def _headers(self, key: str, value: Any) -> dict[str, str]:
        if not isinstance(value, Mapping):
            raise fail(key, Shown(f"<{type(value).__name__}>"), self.allowed)
        headers: dict[str, str] = {}
        for position, (name, text) in enumerate(value.items(), start=1):
            readable = isinstance(name, str) and redact.header_problem(name, "") is None
            where = f"header {name!r}" if readable else f"header #{position}"
            if not isinstance(text, str | int | float) or isinstance(text, bool):
                raise fail(key, Shown(f"{where} (value hidden)"), "a string value")
            problem = readable and redact.header_problem(str(name), str(text))
            if not readable or problem:
                why = problem or "the name is not a valid header name"
                raise fail(key, Shown(f"{where} (value hidden)"), f"a valid header ({why})")
            headers[str(name)] = str(text)
        return headers

    def from_env(self, name: str, text: str) -> dict[str, str]:
        """Malformed entries are dropped with a warning naming the variable and the
        header (its position when even the name is unreadable), never the value."""

        def warn(variable: str, header: str, why: str) -> None:
            warn_ignored(variable, text, f"header {header}: {why}; the other entries are used")

        return redact.parse_headers(name, text, warn)


@dataclass(frozen=True)
class AttributeMap(Parser):
    """Workflow attributes (``{team: risk}``), checked as ``otel_spans.span`` checks them."""

    allowed: str = "a mapping of attribute names to values"

    def __call__(self, key: str, value: Any) -> tuple[tuple[str, str | bool | int | float], ...]:
        value = value or {}
        try:
            return workflow_attributes(dict(value) if isinstance(value, Mapping) else value)
        except ValueError as e:
            raise fail(key, value, f"{self.allowed} ({e})") from None


@dataclass(frozen=True)
class AttributeLabels(Parser):
    allowed: str = (
        f"a list of at most {MAX_ATTRIBUTE_LABELS} workflow attribute names such as "
        "[team, pipeline] (not dask.* or otel_spans.*)"
    )

    def __call__(self, key: str, value: Any) -> tuple[str, ...]:
        value = value or []
        if not isinstance(value, list) or len(value) > MAX_ATTRIBUTE_LABELS:
            raise fail(key, value, self.allowed)
        try:
            names = workflow_attributes({name: "" for name in value})
        except (ValueError, TypeError):
            raise fail(key, value, self.allowed) from None
        if len(names) < len(value):  # a name given twice
            raise fail(key, value, self.allowed + ", each once")
        return tuple(name for name, _ in names)


@dataclass(frozen=True)
class Globs(Parser):
    allowed: str = "a list of glob patterns (strings)"

    def __call__(self, key: str, value: Any) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise fail(key, value, self.allowed)
        return tuple(value)


@dataclass(frozen=True)
class LoggerNames(Parser):
    allowed: str = "a list of logger names such as [distributed]"

    def __call__(self, key: str, value: Any) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(
            isinstance(name, str) and name.strip() for name in value
        ):
            raise fail(key, value, self.allowed)
        return tuple(name.strip() for name in value)


@dataclass(frozen=True)
class LogLevel(Parser):
    """A ``logging`` level name, or none (null, false): no Python log record."""

    allowed: str = ", ".join(PYTHON_LOG_LEVELS) + " or none"

    def __call__(self, key: str, value: Any) -> int | None:
        if value is None or value is False:
            return None
        if isinstance(value, str) and value.strip().upper() in PYTHON_LOG_LEVELS:
            return PYTHON_LOG_LEVELS[value.strip().upper()]
        if isinstance(value, str) and value.strip().lower() == "none":
            return None
        raise fail(key, value, self.allowed)


@dataclass(frozen=True)
class TaskRules(Parser):
    """Per-span task modes, first match wins."""

    allowed: str = "a list of {match, mode} mappings"

    def __call__(self, key: str, value: Any) -> tuple[TaskRule, ...]:
        value = value or []
        if not isinstance(value, list):
            raise fail(key, value, self.allowed)
        modes = "|".join(TASK_MODES)
        rules = []
        for i, rule in enumerate(value):
            where = f"{key}[{i}]"
            if (
                not isinstance(rule, Mapping)
                or set(rule) != {"match", "mode"}
                or not isinstance(rule["match"], str)
            ):
                raise fail(where, rule, f"a mapping {{match: <glob>, mode: {modes}}}")
            if rule["mode"] not in TASK_MODES:
                allowed = ", ".join(TASK_MODES[:-1]) + f" or {TASK_MODES[-1]}"
                raise fail(where + ".mode", rule["mode"], allowed)
            rules.append(TaskRule(rule["match"], rule["mode"]))
        return tuple(rules)


@dataclass(frozen=True)
class TraceUrl(Text):
    allowed: str = "a URL template with {trace_id} (and optionally {span_id})"

    def __call__(self, key: str, value: Any) -> str:
        template = Text()(key, value)
        if "{trace_id}" not in template:
            raise fail(key, template, self.allowed)
        try:
            format_trace_url(template, 1, 1)
        except (KeyError, IndexError, ValueError):
            raise fail(key, template, self.allowed) from None
        return template
