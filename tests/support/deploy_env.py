"""What otel-spans resolves from a deployed container's environment and command line.

Shared by the tests of the compose stack and of the Kubernetes manifests: both check
that each Dask container preloads otel-spans and exports to the collector.
"""

from __future__ import annotations

import importlib.util
import itertools
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import dask.config

from otel_spans.config import Settings


def load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def host_port(endpoint: str) -> tuple[str, int, str]:
    """(host, port, path) of ``http://host:port/path`` or ``host:port``."""
    parts = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"tcp://{endpoint}")
    assert parts.hostname and parts.port, f"no host:port in {endpoint!r}"
    return parts.hostname, parts.port, parts.path


def otel_spans_settings(env: Mapping[str, str]) -> Settings:
    """What otel-spans resolves from a container's environment (DASK_* and OTEL_*)."""
    dask_env = {k: v for k, v in env.items() if k.startswith("DASK_")}
    collected = dask.config.collect(paths=[], env=dask_env)
    overrides = collected.get("otel_spans", collected.get("otel-spans", {}))
    otel_env = {k: v for k, v in env.items() if k.startswith("OTEL_")}
    # Only the container's environment counts, not this process's dask.config.
    with dask.config.set({"otel-spans": {}}):
        return Settings.from_config(overrides=overrides, environ=otel_env)


#: What the downward API gives a pod in these tests, by field path.
POD_FIELDS = {
    "metadata.namespace": "analytics",
    "metadata.name": "dask-worker-0",
    "spec.nodeName": "node-7",
}


def k8s_env(container: Mapping[str, Any]) -> dict[str, str]:
    """A container's environment as Kubernetes sets it: downward-API fields from
    :data:`POD_FIELDS`, and ``$(NAME)`` replaced by a variable defined above it."""
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        if "valueFrom" in entry:
            value = POD_FIELDS[entry["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            value = str(entry["value"])
            for name, defined in env.items():
                value = value.replace(f"$({name})", defined)
        env[entry["name"]] = value
    return env


def has_preload(args: list[str]) -> bool:
    return any(a == "--preload" and b == "otel_spans" for a, b in itertools.pairwise(args))


def assert_exports_to_a_collector(env: Mapping[str, str]) -> None:
    settings = otel_spans_settings(env)
    assert settings.traces.target.kind == "otlp"
    assert settings.metrics.target.kind == "otlp"
    assert host_port(str(settings.traces.target.endpoint))[1] == 4317
