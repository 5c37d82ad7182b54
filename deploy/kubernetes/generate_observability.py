"""Writes ``deploy/kubernetes/observability.yaml`` from the repository's own configs.

The OpenTelemetry Collector (a Deployment running ``deploy/collector-config.yaml``, the
same pipeline as the compose stack) and Loki (``deploy/loki.yaml``) for Kubernetes, in
namespace ``observability``. The configs are embedded in ConfigMaps verbatim, so this
script is the one place that copies them; ``tests/deploy/test_kubernetes.py`` fails
when the committed manifest differs from what it writes. Run

    python deploy/kubernetes/generate_observability.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = HERE / "observability.yaml"

NAMESPACE = "observability"
COLLECTOR_IMAGE = "otel/opentelemetry-collector:0.152.0"
LOKI_IMAGE = "grafana/loki:3.7.3"

#: Where the collector sends each signal: your backends' Services. The defaults assume
#: Jaeger, Tempo and Prometheus (with --web.enable-otlp-receiver) in this namespace;
#: Loki is deployed below.
COLLECTOR_ENV = {
    "JAEGER_OTLP_ENDPOINT": f"jaeger.{NAMESPACE}.svc.cluster.local:4317",
    "TEMPO_OTLP_ENDPOINT": f"tempo.{NAMESPACE}.svc.cluster.local:4317",
    "PROMETHEUS_OTLP_ENDPOINT": f"http://prometheus.{NAMESPACE}.svc.cluster.local:9090/api/v1/otlp",
    "LOKI_OTLP_ENDPOINT": f"http://loki.{NAMESPACE}.svc.cluster.local:3100/otlp",
}


def labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "otel-spans"}


def config_map(name: str, key: str, source: Path) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels(name)},
        "data": {key: source.read_text()},
    }


def service(name: str, ports: list[tuple[str, int]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels(name)},
        "spec": {
            "selector": labels(name),
            "ports": [
                {"name": port_name, "port": port, "targetPort": port_name, "protocol": "TCP"}
                for port_name, port in ports
            ],
        },
    }


def deployment(
    name: str,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels(name)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels(name)},
            "template": {
                "metadata": {"labels": labels(name)},
                "spec": {
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "fsGroup": 10001},
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


COLLECTOR_PORTS = [("otlp-grpc", 4317), ("otlp-http", 4318), ("metrics", 8888)]
LOKI_PORTS = [("http", 3100), ("grpc", 9096)]


def collector() -> list[dict[str, Any]]:
    container = {
        "name": "otel-collector",
        "image": COLLECTOR_IMAGE,
        "args": ["--config=/etc/otelcol/config.yaml"],
        "env": [{"name": k, "value": v} for k, v in COLLECTOR_ENV.items()],
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in COLLECTOR_PORTS],
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            # memory_limiter (limit_percentage) works from this limit.
            "limits": {"memory": "1Gi"},
        },
        "volumeMounts": [{"name": "config", "mountPath": "/etc/otelcol", "readOnly": True}],
    }
    volumes = [{"name": "config", "configMap": {"name": "otel-collector"}}]
    return [
        config_map("otel-collector", "config.yaml", HERE.parent / "collector-config.yaml"),
        deployment("otel-collector", container, volumes),
        service("otel-collector", COLLECTOR_PORTS),
    ]


def loki() -> list[dict[str, Any]]:
    container = {
        "name": "loki",
        "image": LOKI_IMAGE,
        "args": ["-config.file=/etc/loki/loki.yaml"],
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in LOKI_PORTS],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 10},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/loki", "readOnly": True},
            {"name": "data", "mountPath": "/loki"},
        ],
    }
    volumes = [
        {"name": "config", "configMap": {"name": "loki"}},
        # Single replica on local storage, like the compose stack: replace with a
        # PersistentVolumeClaim (or Loki's Helm chart and object storage) to keep logs
        # across restarts.
        {"name": "data", "emptyDir": {}},
    ]
    return [
        config_map("loki", "loki.yaml", ROOT / "deploy" / "loki.yaml"),
        deployment("loki", container, volumes),
        service("loki", LOKI_PORTS),
    ]


def manifests() -> list[dict[str, Any]]:
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": {"app.kubernetes.io/part-of": "otel-spans"}},
    }
    return [namespace, *collector(), *loki()]


# PyYAML ships no type hints (and the project installs no stubs): its classes are Any.
class _Dumper(yaml.SafeDumper):  # type: ignore[misc]
    """A SafeDumper of its own, so the block-style representer below stays local."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render() -> str:
    header = (
        "# Generated by deploy/kubernetes/generate_observability.py from\n"
        "# deploy/collector-config.yaml and deploy/loki.yaml: edit those and re-run it. The\n"
        "# OpenTelemetry Collector (the compose stack's pipeline) and Loki in namespace\n"
        "# observability; the Dask manifests send to\n"
        "# otel-collector.observability.svc.cluster.local:4317.\n"
    )
    docs = [yaml.dump(m, Dumper=_Dumper, sort_keys=False, width=100) for m in manifests()]
    return header + "---\n" + "---\n".join(docs)


def main() -> int:
    OUT.write_text(render())
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
