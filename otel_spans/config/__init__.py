"""Settings, read once from dask.config and the standard ``OTEL_*`` variables.

Every setting is one row of :mod:`.table` (key, parser and bounds, default, the
``OTEL_*`` variables it falls back to, a line of description) and resolves through one
lookup (:mod:`.resolve`): the ``otel-spans`` dask.config key when it is not null, then
the signal-specific ``OTEL_*`` variable, then the general one, then the default. The
defaults dask.config sees are shipped in ``otel-spans.yaml``. Validation is eager: a bad
value of an ``otel-spans`` key raises :class:`ConfigError` naming the key, the value and
what is allowed, so a misconfigured scheduler fails at start instead of exporting
nothing.

``OTEL_*`` variables are different: they are process-wide, often set for other code in
the same container, and the OTel SDK configuration specification says an invalid or
unsupported value is warned about and ignored. So they never raise: a bad one is logged
once and the setting falls back to the value it would have without the variable
(docs/configuration.md lists each variable and what otel-spans does with it).

The typed settings themselves are plain dataclasses in :mod:`otel_spans.settings`,
which imports nothing of Dask; they are re-exported here for the entry points.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import dask.config
import yaml

from otel_spans import settings as _settings
from otel_spans.config.parsers import _WARNED as _WARNED  # tests clear it
from otel_spans.config.parsers import NAMESPACE, Boolean, warn_calls, warn_ignored
from otel_spans.config.resolve import Resolver, canonical
from otel_spans.config.structured import TraceUrl
from otel_spans.config.table import OTEL_VARIABLES, ROWS, SETTINGS
from otel_spans.settings import (
    MAX_ATTRIBUTE_LABELS,
    PYTHON_LOG_LEVELS,
    CaptureSettings,
    CodeCapture,
    ConfigError,
    ExceptionCapture,
    ExporterKind,
    ExportTarget,
    LogSettings,
    MetricsSettings,
    ProfileSettings,
    Protocol,
    PythonLogSettings,
    RecordLimits,
    TaskMode,
    TaskRule,
    TaskSettings,
    Temporality,
    TraceSettings,
    format_trace_url,
)

__all__ = [
    "MAX_ATTRIBUTE_LABELS",
    "NAMESPACE",
    "OTEL_VARIABLES",
    "PYTHON_LOG_LEVELS",
    "ROWS",
    "SETTINGS",
    "CaptureSettings",
    "CodeCapture",
    "ConfigError",
    "ExceptionCapture",
    "ExportTarget",
    "ExporterKind",
    "LogSettings",
    "MetricsSettings",
    "ProfileSettings",
    "Protocol",
    "PythonLogSettings",
    "RecordLimits",
    "Settings",
    "TaskMode",
    "TaskRule",
    "TaskSettings",
    "Temporality",
    "TraceSettings",
    "caller_link_default",
    "check_keys",
    "format_trace_url",
    "load_defaults",
    "register_defaults",
    "trace_url_template",
    "warn_ignored",
]

_DEFAULTS_FILE = Path(__file__).resolve().parent.parent / "otel-spans.yaml"


@functools.cache
def _parsed_defaults() -> dict[str, Any]:
    """``otel-spans.yaml`` parsed once per process: PyYAML's pure-Python loader takes
    milliseconds, and every cluster start reads the defaults several times."""
    with _DEFAULTS_FILE.open() as f:
        data: dict[str, Any] = yaml.safe_load(f)
    return data


def load_defaults() -> dict[str, Any]:
    """The defaults shipped in ``otel-spans.yaml`` (a fresh copy)."""
    return copy.deepcopy(_parsed_defaults())


#: The copy handed to dask.config, to recognise it among its defaults.
_registered: list[dict[str, Any]] = []


def register_defaults() -> None:
    """Register the shipped defaults with dask.config without overriding user values.

    Once per process (again if dask.config's defaults or config were reset): every
    ``update_defaults`` call appends to ``dask.config.defaults`` and merges all of
    them, so a preload calling it per cluster start would make each start dearer.
    """
    registered = _registered[0] if _registered else None
    if NAMESPACE in dask.config.config and any(d is registered for d in dask.config.defaults):
        return
    defaults = load_defaults()
    _registered[:] = [defaults]
    dask.config.update_defaults(defaults)


#: Types whose values parse alike whenever they are equal (and of the same type).
_PLAIN = frozenset({str, int, float, bool, type(None)})
#: The last settings resolved per class, with the key of what they were resolved from.
_last: dict[type, tuple[Hashable, Settings]] = {}


def _frozen(value: Any) -> Hashable:
    """A key of plain configuration data; ``1``, ``1.0`` and ``True`` differ in it, as
    they do to the parsers. TypeError for anything else: its parse is not vouched for."""
    kind = type(value)
    if kind in _PLAIN:
        return (kind, value)
    if kind is dict:
        return (dict, tuple((_frozen(k), _frozen(v)) for k, v in value.items()))
    if kind is list or kind is tuple:
        return (kind, tuple(_frozen(v) for v in value))
    raise TypeError(kind)


def _otel_variables(environ: Mapping[str, str]) -> Hashable:
    """Every variable the settings may read (the table's are all ``OTEL_*``)."""
    return tuple(sorted((k, v) for k, v in environ.items() if k.startswith("OTEL_")))


def _reusable(settings: _settings.Settings) -> bool:
    """Whether settings hold nothing that depends on more than the configuration: a
    certificate path is checked against the file system at each resolution."""
    targets = (settings.traces.target, settings.metrics.target, settings.logs.target)
    return all(
        t.certificate is None and t.client_certificate is None and t.client_key is None
        for t in targets
    )


class Settings(_settings.Settings):
    """:class:`otel_spans.settings.Settings`, with the constructor that reads dask.config.

    The dataclass lives in the Dask-free :mod:`otel_spans.settings` (what ``export/``
    and ``telemetry/`` import); this subclass only adds :meth:`from_config`.
    """

    @classmethod
    def from_config(
        cls,
        overrides: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Settings:
        """Resolve the settings from dask.config (+ ``overrides``) and ``environ``.

        The last resolution is reused while its inputs are the same (the ``otel-spans``
        dask.config values, the overrides and the ``OTEL_*`` variables, compared by
        type and value): a cluster start resolves them on the scheduler and again on
        each worker of the process, and a resolution costs about half a millisecond.
        Settings are frozen; one that warned about a variable or read a certificate's
        path is resolved again each time, so that it warns and fails as before.
        """
        env = os.environ if environ is None else environ
        user = dask.config.get(NAMESPACE, {})
        key: Hashable | None
        try:
            key = (_frozen(user), _frozen(dict(overrides or {})), _otel_variables(env))
        except TypeError:
            key = None
        last = _last.get(cls)
        if key is not None and last is not None and last[0] == key:
            return last[1]
        warned = warn_calls()
        raw = dask.config.merge(load_defaults()[NAMESPACE], user)
        if overrides:
            raw = dask.config.merge(raw, canonical(dict(overrides)))
        settings = Resolver(raw, env).settings(cls)
        if key is not None and warn_calls() == warned and _reusable(settings):
            _last[cls] = (key, settings)
        return settings


def trace_url_template(value: Any) -> str | None:
    """Validate an ``otel-spans.trace-url`` value (ConfigError naming it when bad)."""
    return None if value is None else str(TraceUrl()("trace-url", value))


def check_keys(overrides: Mapping[str, Any]) -> None:
    """Fail on unknown ``otel-spans`` keys without resolving anything else.

    Used where the environment is not the one that will run the exporter (a client
    building a plugin for a remote scheduler): names can be checked, values only there.
    """
    Resolver(overrides, {}).check_keys()


def caller_link_default() -> bool:
    """``otel-spans.traces.caller-link`` of the calling process's dask.config.

    Read on the client each time ``otel_spans.span`` opens a root span (settings are
    otherwise resolved where the exporters run); parsed as every boolean setting is.
    """
    key = "traces.caller-link"
    return bool(Boolean()(key, dask.config.get(f"{NAMESPACE}.{key}", False)))
