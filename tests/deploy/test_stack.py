"""deploy/: the one-command stack is consistent, and its dashboards show real data.

No Docker engine runs here, so the stack is checked piece by piece, for real where a
real tool exists:

* the compose file against the Compose Specification's JSON schema, promtool on
  prometheus.yml, the collector config against the core distribution's components;
* every service name and port one file refers to exists in the file that defines it
  (collector exporters -> compose services, scrape targets, Grafana data sources...);
* the Dask services' environment and the Kubernetes snippets resolve, through
  otel-spans' own settings code, to the endpoints and ports the rest expects;
* every PromQL expression and template variable of the Grafana dashboards runs against
  a real Prometheus that scraped the scheduler of a real Dask run of the demo
  workflow (started by deploy/run_demo.py), and returns data;
* the metric names the dashboards use are the ones Prometheus 3's OTLP receiver makes
  of otel-spans' instruments (the primary path), and exactly what the scheduler's
  Prometheus endpoint serves (the path tested live).
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import re
import subprocess
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask.config
import jsonschema
import pytest
import yaml

from otel_spans import config, semconv
from tests.servers.otelcol import OtelcolServer, otelcol_binary
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.ports import wait_until
from tests.servers.prometheus import (
    PROMTOOL_BINARY,
    PrometheusServer,
    promtool_check_config,
)
from tests.support.dashboards import (
    LABEL_VALUES,
    all_exprs,
    dashboards,
    expr_metric_names,
    panels,
    reads_recorded,
    recorded_names,
    resolve_variables,
    variable_names,
    variable_query,
)
from tests.support.deploy_env import has_preload, host_port, load_module, otel_spans_settings
from tests.support.metric_names import expected_metric_names, otlp_label_name, otlp_prometheus_name

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE_FILE = DEPLOY / "docker-compose.yaml"
COLLECTOR_FILE = DEPLOY / "collector-config.yaml"
PROMETHEUS_FILE = DEPLOY / "prometheus.yml"
TEMPO_FILE = DEPLOY / "tempo.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
GRAFANA = DEPLOY / "grafana"
DATASOURCES_DIR = GRAFANA / "provisioning" / "datasources"
PROVIDERS_DIR = GRAFANA / "provisioning" / "dashboards"
DASHBOARDS_DIR = GRAFANA / "dashboards"
LOKI_FILE = DEPLOY / "loki.yaml"
ALERTS_FILE = DEPLOY / "prometheus-alerts.yml"
EXPORT_DIR = GRAFANA / "export"
DEPLOY_README = DEPLOY / "README.md"
COMPOSE_SCHEMA = Path(__file__).parent / "schemas" / "compose-spec.json"

#: Collector component types that may appear in collector-config.yaml: those of the
#: collector's core repository, shipped by every official distribution (otelcol,
#: otelcol-contrib, otelcol-k8s...). Anything from contrib would break on `otelcol`.
CORE_COMPONENTS: dict[str, set[str]] = {
    "receivers": {"otlp"},
    "processors": {"memory_limiter"},
    "exporters": {"otlp_grpc", "otlp_http"},
    "extensions": set(),
    "connectors": set(),
}

#: `${env:VAR:-default}` in the collector config.
ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*):-([^}]*)\}")

#: Grafana's built-in variables the dashboards may use, and what the tests put in.
BUILTIN_VARIABLES = {"__rate_interval", "__range", "__interval", "__from", "__to"}


# -- loading ----------------------------------------------------------------------------
def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_yaml_documents(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def compose_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = load_yaml(COMPOSE_FILE)["services"]
    return services


def datasources() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(DATASOURCES_DIR.glob("*.y*ml")):
        out.extend(load_yaml(path)["datasources"])
    return out


def env_default(value: str) -> str:
    """A collector config value with every `${env:VAR:-default}` replaced by its default."""
    return ENV_REF.sub(lambda m: m.group(2), value)


def container_ports(service: Mapping[str, Any]) -> set[int]:
    """Ports a compose service declares (`expose`, and the container side of `ports`)."""
    ports = {int(p) for p in service.get("expose", [])}
    for entry in service.get("ports", []):
        ports.add(int(str(entry).split("/")[0].rsplit(":", 1)[-1]))
    return ports


def bind_mounts(service: Mapping[str, Any]) -> dict[str, Path]:
    """Container path -> host path of a compose service's bind mounts."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = str(volume).split(":")[:2]
        if source.startswith((".", "/")):
            out[target] = (DEPLOY / source).resolve()
    return out


def flag_value(command: list[str], flag: str) -> str | None:
    """The value of ``--flag=value``, ``-flag=value`` or ``--flag value`` in ``command``."""
    for i, arg in enumerate(command):
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(command):
            return command[i + 1]
    return None


# -- the compose file -------------------------------------------------------------------
def test_every_deploy_yaml_file_parses() -> None:
    files = [*sorted(DEPLOY.rglob("*.yaml")), *sorted(DEPLOY.rglob("*.yml"))]
    assert COLLECTOR_FILE in files
    assert len(files) >= 12
    for path in files:
        documents = load_yaml_documents(path)
        assert documents and all(isinstance(d, dict) for d in documents), path


def test_compose_file_follows_the_compose_specification() -> None:
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(load_yaml(COMPOSE_FILE))
    ]
    assert not errors, "\n".join(errors)


def test_compose_images_are_pinned() -> None:
    expected = {
        "collector": r"otel/opentelemetry-collector(-contrib)?:0\.\d+\.\d+",
        "jaeger": r"jaegertracing/jaeger:2\.\d+\.\d+",
        "tempo": r"grafana/tempo:3\.\d+\.\d+",  # tempo.yaml is written for Tempo 3
        "prometheus": r"prom/prometheus:v3\.\d+\.\d+",
        "grafana": r"grafana/grafana:1[23]\.\d+\.\d+",
        "loki": r"grafana/loki:3\.\d+\.\d+",
    }
    services = compose_services()
    for name, pattern in expected.items():
        assert re.fullmatch(pattern, services[name]["image"]), (name, services[name]["image"])
    for name, service in services.items():
        image = service.get("image", "")
        if "build" in service:
            # Built here: its base image is what must be pinned.
            bases = re.findall(r"^FROM\s+(\S+)", DOCKERFILE.read_text(), re.MULTILINE)
            assert bases
            for base in bases:
                assert re.search(r":[^:/]*\d", base) and not base.endswith(":latest"), base
            continue
        tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
        assert tag and tag != "latest" and re.search(r"\d", tag), f"{name}: {image!r}"


def test_compose_bind_mounts_exist_where_the_services_read_them() -> None:
    services = compose_services()
    for name, service in services.items():
        for target, source in bind_mounts(service).items():
            assert source.exists(), f"{name}: {source} (mounted on {target}) is missing"
    collector = services["collector"]
    config = flag_value(collector["command"], "--config")
    assert bind_mounts(collector)[str(config)] == COLLECTOR_FILE
    prometheus = services["prometheus"]
    config = flag_value(prometheus["command"], "--config.file")
    assert bind_mounts(prometheus)[str(config)] == PROMETHEUS_FILE
    tempo = services["tempo"]
    config = flag_value(tempo["command"], "-config.file")
    assert bind_mounts(tempo)[str(config)] == TEMPO_FILE
    loki = services["loki"]
    config = flag_value(loki["command"], "-config.file")
    assert bind_mounts(loki)[str(config)] == LOKI_FILE
    # The alert rules sit next to prometheus.yml, which names them relatively.
    (rule_file,) = load_yaml(PROMETHEUS_FILE)["rule_files"]
    prometheus_config = str(flag_value(prometheus["command"], "--config.file"))
    mounted_rules = prometheus_config.rsplit("/", 1)[0] + "/" + rule_file
    assert bind_mounts(prometheus)[mounted_rules] == ALERTS_FILE
    grafana = bind_mounts(services["grafana"])
    assert grafana["/etc/grafana/provisioning/datasources"] == DATASOURCES_DIR
    assert grafana["/etc/grafana/provisioning/dashboards"] == PROVIDERS_DIR
    # The dashboard provider reads the directory deploy/grafana/dashboards is mounted on.
    mounted = {source: target for target, source in grafana.items()}
    for path in sorted(PROVIDERS_DIR.glob("*.y*ml")):
        for provider in load_yaml(path)["providers"]:
            assert provider["options"]["path"] == mounted[DASHBOARDS_DIR]
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(mounted[DASHBOARDS_DIR] + "/")
    assert (DASHBOARDS_DIR / home.rsplit("/", 1)[-1]).is_file()


def dockerfile_copies() -> dict[str, str]:
    """Container path -> source path (relative to the build context) of each COPY."""
    workdir, out = "/", {}
    for line in DOCKERFILE.read_text().splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "WORKDIR":
            workdir = words[1]
        elif words[0] == "COPY":
            *sources, dest = words[1:]
            base = dest if dest.startswith("/") else f"{workdir.rstrip('/')}/{dest}"
            for source in sources:
                target = base.rstrip("/") + "/" + Path(source).name if dest.endswith("/") else base
                out[str(Path(target))] = source
    return out


def test_the_dask_image_builds_from_this_repository() -> None:
    services = compose_services()
    build = services["scheduler"]["build"]
    context = (DEPLOY / build["context"]).resolve()
    assert context == ROOT
    assert (context / build["dockerfile"]).resolve() == DOCKERFILE
    copies = dockerfile_copies()
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    for source in copies.values():
        assert (context / source).exists(), source
        # Excluded by `**` unless re-included: every copied path must be.
        assert f"!{source}" in ignore or f"!{source}/**" in ignore, source
    # The demo service runs the script where the image put it.
    demo = services["demo"]["command"]
    script = next(arg for arg in demo if arg.endswith("run_demo.py"))
    assert copies[script] == "deploy/run_demo.py"
    # The pull endpoint needs packages pyproject does not (yet) require.
    pyproject = (ROOT / "pyproject.toml").read_text()
    installed = DOCKERFILE.read_text()
    for dist in ("opentelemetry-exporter-prometheus", "prometheus-client"):
        assert dist in pyproject or dist in installed, dist


def test_dask_services_preload_otel_spans_and_resolve_their_settings() -> None:
    services = compose_services()
    scheduler = services["scheduler"]
    assert scheduler["command"][:2] == ["dask", "scheduler"]
    assert has_preload(scheduler["command"])
    settings = otel_spans_settings(scheduler["environment"])
    assert settings.enabled
    assert settings.traces.target.kind == "otlp"
    assert settings.traces.target.endpoint == "http://collector:4317"
    assert settings.traces.target.protocol == "grpc"
    assert settings.metrics.target.kind == "otlp"
    assert settings.metrics.prometheus_port == 9464
    assert settings.metrics.prometheus_host == "0.0.0.0"
    assert settings.metrics.cpu_hour_price == pytest.approx(0.05)
    assert settings.metrics.interval == pytest.approx(5.0)
    assert settings.service_name == "dask"
    scheduler_port = int(str(flag_value(scheduler["command"], "--port")))
    assert {scheduler_port, settings.metrics.prometheus_port} <= container_ports(scheduler)

    worker = services["worker"]
    assert worker["command"][:2] == ["dask", "worker"]
    assert has_preload(worker["command"])
    assert worker["deploy"]["replicas"] == 2
    address = f"tcp://scheduler:{scheduler_port}"
    assert address in worker["command"]

    demo = services["demo"]["command"]
    assert flag_value(demo, "--scheduler") == address
    assert flag_value(demo, "--workers") == "2"
    run_demo = load_module(DEPLOY / "run_demo.py")
    assert address == run_demo.DEFAULT_SCHEDULER


# -- the collector ----------------------------------------------------------------------
def test_collector_uses_only_core_components_and_defined_ones() -> None:
    config = load_yaml(COLLECTOR_FILE)
    for kind, allowed in CORE_COMPONENTS.items():
        for component_id in config.get(kind) or {}:
            assert component_id.split("/")[0] in allowed, f"{kind}: {component_id} is not core"
    used: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set()}
    pipelines = config["service"]["pipelines"]
    assert set(pipelines) == {"traces", "metrics", "logs"}
    for name, pipeline in pipelines.items():
        for kind in used:
            for component_id in pipeline.get(kind, []):
                assert component_id in config[kind], f"pipeline {name}: undefined {component_id}"
                used[kind].add(component_id)
        assert pipeline["processors"] == ["memory_limiter"], name
    for kind, ids in used.items():
        assert set(config[kind]) == ids, f"{kind} defined but unused: {set(config[kind]) - ids}"
    assert set(pipelines["traces"]["exporters"]) == {"otlp_grpc/jaeger", "otlp_grpc/tempo"}
    assert pipelines["metrics"]["exporters"] == ["otlp_http/prometheus"]
    # Logs land in Loki, not in the collector's own output.
    assert pipelines["logs"]["exporters"] == ["otlp_http/loki"]
    # Batching by the exporters (the collector's recommendation), not a processor.
    for exporter_id, exporter in config["exporters"].items():
        assert "batch" in exporter["sending_queue"], exporter_id
    # Its own metrics, scraped by prometheus.yml's otel-collector job.
    (reader,) = config["service"]["telemetry"]["metrics"]["readers"]
    prometheus = reader["pull"]["exporter"]["prometheus"]
    port = int(env_default(str(prometheus["port"])))
    jobs = {j["job_name"]: j for j in load_yaml(PROMETHEUS_FILE)["scrape_configs"]}
    (target,) = jobs["otel-collector"]["static_configs"][0]["targets"]
    assert host_port(target)[:2] == ("collector", port)
    assert port in container_ports(compose_services()["collector"])


def test_collector_endpoints_are_overridable_and_point_at_compose_services() -> None:
    config = load_yaml(COLLECTOR_FILE)
    services = compose_services()
    collector_ports = container_ports(services["collector"])
    for protocol, port in (("grpc", 4317), ("http", 4318)):
        endpoint = config["receivers"]["otlp"]["protocols"][protocol]["endpoint"]
        assert ENV_REF.fullmatch(endpoint), endpoint
        assert env_default(endpoint) == f"0.0.0.0:{port}"
        assert port in collector_ports
    expected = {
        "otlp_grpc/jaeger": ("jaeger", 4317, ""),
        "otlp_grpc/tempo": ("tempo", 4317, ""),
        "otlp_http/prometheus": ("prometheus", 9090, "/api/v1/otlp"),
        "otlp_http/loki": ("loki", 3100, "/otlp"),
    }
    for exporter, (host, port, path) in expected.items():
        endpoint = config["exporters"][exporter]["endpoint"]
        assert ENV_REF.fullmatch(endpoint), f"{exporter}: {endpoint} is not overridable"
        assert host_port(env_default(endpoint)) == (host, port, path)
        assert port in container_ports(services[host]), f"{host} does not expose {port}"
    # What the collector sends to, the receivers accept.
    tempo = load_yaml(TEMPO_FILE)["distributor"]["receivers"]["otlp"]["protocols"]
    assert tempo["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert "--web.enable-otlp-receiver" in services["prometheus"]["command"]
    assert services["jaeger"]["environment"]["JAEGER_LISTEN_HOST"] == "0.0.0.0"
    loki = load_yaml(LOKI_FILE)
    assert loki["server"]["http_listen_port"] == 3100
    # Loki refuses OTLP logs without structured metadata (schema v13, tsdb).
    assert loki["limits_config"]["allow_structured_metadata"] is True
    assert {c["schema"] for c in loki["schema_config"]["configs"]} == {"v13"}


def test_tempo_config_is_written_for_tempo_3() -> None:
    tempo = load_yaml(TEMPO_FILE)
    # Tempo 3 refuses to start with these (its ingester and compactor are gone).
    for removed in ("ingester", "ingester_client", "compactor", "metrics_generator_client"):
        assert removed not in tempo, removed
    processors = tempo["overrides"]["defaults"]["metrics_generator"]["processors"]
    assert "local-blocks" not in processors
    assert set(processors) == {"service-graphs", "span-metrics"}


# -- Prometheus -------------------------------------------------------------------------
def promtool_major_version() -> int:
    out = subprocess.run(
        [PROMTOOL_BINARY, "--version"], capture_output=True, text=True, check=False
    ).stdout
    match = re.search(r"version (\d+)\.", out)
    assert match, out
    return int(match[1])


def test_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    config = load_yaml(PROMETHEUS_FILE)
    ok, out = promtool_check_config(PROMETHEUS_FILE)
    if promtool_major_version() >= 3:
        assert ok, out
    else:
        # promtool 2.x (Debian's 2.42) predates the `otlp:` block of Prometheus 3 and
        # rejects the whole file for it; it checks everything else in a copy without it.
        assert not ok and "otlp" in out, out
        copy = tmp_path / "prometheus.yml"
        copy.write_text(yaml.safe_dump({k: v for k, v in config.items() if k != "otlp"}))
        for rule_file in config["rule_files"]:
            (tmp_path / rule_file).write_text((DEPLOY / rule_file).read_text())
        ok, out = promtool_check_config(copy)
        assert ok, out


def test_prometheus_otlp_block_names_series_like_the_pull_endpoint() -> None:
    otlp = load_yaml(PROMETHEUS_FILE)["otlp"]
    assert set(otlp) <= {
        "translation_strategy",
        "promote_resource_attributes",
        "keep_identifying_resource_attributes",
    }
    assert otlp["translation_strategy"] == "UnderscoreEscapingWithSuffixes"
    promoted = otlp["promote_resource_attributes"]
    # Prometheus rejects empty and duplicated entries.
    assert all(isinstance(a, str) and a.strip() == a and a for a in promoted)
    assert len(set(promoted)) == len(promoted)
    assert {semconv.SERVICE_NAME, semconv.DASK_CLUSTER_NAME} <= set(promoted)


def test_prometheus_scrapes_the_scheduler_with_the_labels_of_the_otlp_path() -> None:
    services = compose_services()
    env = services["scheduler"]["environment"]
    jobs = load_yaml(PROMETHEUS_FILE)["scrape_configs"]
    job = next(j for j in jobs if j["job_name"] == "dask-scheduler")
    (static,) = job["static_configs"]
    (target,) = static["targets"]
    assert host_port(target)[:2] == (
        "scheduler",
        int(env["DASK_OTEL_SPANS__METRICS__PROMETHEUS_PORT"]),
    )
    # OTLP-ingested series get service_name / dask_cluster_name from the promoted
    # resource attributes; the scraped ones get the same from these static labels.
    assert static["labels"] == {
        "service_name": env["OTEL_SERVICE_NAME"],
        "dask_cluster_name": env["DASK_OTEL_SPANS__CLUSTER_NAME"],
    }
    # A different job than the OTLP path (job = service.name): the dashboards' job
    # variable picks one of them, so nothing is counted twice.
    assert job["job_name"] != env["OTEL_SERVICE_NAME"]
    command = services["prometheus"]["command"]
    assert "--enable-feature=exemplar-storage" in command
    assert "--web.enable-remote-write-receiver" in command  # Tempo's metrics generator


# -- Tempo and Grafana ------------------------------------------------------------------
def test_every_cross_service_address_resolves_to_a_declared_port() -> None:
    services = compose_services()
    tempo = load_yaml(TEMPO_FILE)
    addresses: list[tuple[str, str]] = [
        ("tempo remote_write", w["url"])
        for w in tempo["metrics_generator"]["storage"]["remote_write"]
    ]
    addresses += [(f"datasource {d['name']}", d["url"]) for d in datasources()]
    addresses += [
        (f"scrape {j['job_name']}", t)
        for j in load_yaml(PROMETHEUS_FILE)["scrape_configs"]
        for s in j.get("static_configs", [])
        for t in s["targets"]
    ]
    addresses += [
        (f"scrape {j['job_name']}", f"{name}:{d['port']}")
        for j in load_yaml(PROMETHEUS_FILE)["scrape_configs"]
        for d in j.get("dns_sd_configs", [])
        for name in d["names"]
    ]
    addresses.append(
        ("scheduler OTLP", services["scheduler"]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"])
    )
    assert len(addresses) >= 6
    for what, address in addresses:
        host, port, _ = host_port(address)
        assert host in services, f"{what}: no service {host}"
        assert port in container_ports(services[host]), f"{what}: {host} does not expose {port}"
    # The ports are the ones the services listen on.
    assert tempo["server"]["http_listen_port"] in container_ports(services["tempo"])
    by_type = {d["type"]: d for d in datasources()}
    assert host_port(by_type["tempo"]["url"])[1] == tempo["server"]["http_listen_port"]
    assert host_port(by_type["jaeger"]["url"])[1] == 16686
    remote_write = tempo["metrics_generator"]["storage"]["remote_write"][0]["url"]
    assert host_port(remote_write)[2] == "/api/v1/write"


def test_grafana_datasources_link_to_each_other() -> None:
    sources = datasources()
    uids = {d["uid"]: d["type"] for d in sources}
    assert len(uids) == len(sources)
    assert set(uids.values()) == {"prometheus", "tempo", "jaeger", "loki"}
    for source in sources:
        data = source.get("jsonData", {})
        for destination in data.get("exemplarTraceIdDestinations", []):
            assert uids[destination["datasourceUid"]] in {"tempo", "jaeger"}
            assert destination["name"] == "trace_id"  # the exemplar label Prometheus stores
        for key in ("tracesToMetrics", "serviceMap"):
            if key in data:
                assert uids[data[key]["datasourceUid"]] == "prometheus", (source["name"], key)
    tempo = next(d for d in sources if d["type"] == "tempo")["jsonData"]
    assert tempo["serviceMap"] and tempo["tracesToMetrics"]["queries"]
    # service.name -> job selects the OTLP-ingested series only (no double counting).
    assert {"key": "service.name", "value": "job"} in tempo["tracesToMetrics"]["tags"]
    # Traces -> logs (Loki indexes service.name as service_name) and logs -> traces.
    for source in sources:
        to_logs = source.get("jsonData", {}).get("tracesToLogsV2")
        if to_logs:
            assert uids[to_logs["datasourceUid"]] == "loki"
            assert {"key": "service.name", "value": "service_name"} in to_logs["tags"]
    assert all(
        "tracesToLogsV2" in d["jsonData"] for d in sources if d["type"] in {"tempo", "jaeger"}
    )
    loki = next(d for d in sources if d["type"] == "loki")["jsonData"]
    (derived,) = loki["derivedFields"]
    assert uids[derived["datasourceUid"]] == "tempo"
    assert derived["matcherType"] == "label" and derived["matcherRegex"] == "trace_id"


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def test_grafana_provisioning_escapes_dollars() -> None:
    """Grafana expands $VAR in provisioning values: a literal $ must be written $$."""
    found = []
    for path in [*DATASOURCES_DIR.glob("*.y*ml"), *PROVIDERS_DIR.glob("*.y*ml")]:
        for text in strings(load_yaml(path)):
            assert not re.search(r"(?<!\$)\$(?!\$)", text), f"{path.name}: unescaped $ in {text!r}"
            found += re.findall(r"\$\$__tags", text)
    assert len(found) >= 4  # the traces-to-metrics queries do use it


# -- dashboards: structure --------------------------------------------------------------
#: Dask's own metrics (distributed's /metrics) and the collector's self-metrics the
#: dashboards use, with their labels: not otel-spans' instruments, so not in
#: docs/telemetry.md; the live test scrapes real ones and runs the panels on them.
NATIVE_METRICS = {
    "dask_scheduler_workers",
    "dask_scheduler_tasks",
    "dask_worker_threads",
    "dask_worker_memory_bytes",
}
NATIVE_LABELS = {"state", "type", "receiver", "exporter", "__name__"}


def is_native(expr: str) -> bool:
    return "otelcol_" in expr or bool(expr_metric_names_plain(expr) & NATIVE_METRICS)


def expr_metric_names_plain(expr: str) -> set[str]:
    return set(re.findall(r"\b([a-z_]+)\b", expr))


def test_dashboards_are_what_the_generator_writes() -> None:
    generator = load_module(GRAFANA / "generate_dashboards.py")
    assert set(generator.DASHBOARDS) == {p.name for p in DASHBOARDS_DIR.glob("*.json")}
    assert set(generator.DASHBOARDS) == {p.name for p in EXPORT_DIR.glob("*.json")}
    for name, build in generator.DASHBOARDS.items():
        assert (DASHBOARDS_DIR / name).read_text() == generator.render(build), (
            f"{name} is stale: run python deploy/grafana/generate_dashboards.py"
        )
        assert (EXPORT_DIR / name).read_text() == generator.render_export(build), (
            f"export/{name} is stale: run python deploy/grafana/generate_dashboards.py"
        )


def test_exported_dashboards_import_into_any_grafana() -> None:
    """__inputs/__requires as grafana.com expects; no uid of our provisioning left."""
    provisioned = {d["uid"]: d["type"] for d in datasources()}
    for name, dashboard in dashboards().items():
        exported = json.loads((EXPORT_DIR / name).read_text())
        inputs = {i["name"]: i for i in exported["__inputs"]}
        assert all(i["type"] == "datasource" for i in inputs.values())
        # One input per data source type the dashboard uses.
        assert {i["pluginId"] for i in inputs.values()} == set(provisioned.values())
        text = json.dumps({k: v for k, v in exported.items() if k != "__inputs"})
        used = set(re.findall(r"\$\{(DS_[A-Z_]+)\}", text))
        assert used == set(inputs), used ^ set(inputs)
        requires = {(r["type"], r["id"]) for r in exported["__requires"]}
        assert ("grafana", "grafana") in requires
        assert {("datasource", kind) for kind in provisioned.values()} <= requires
        panel_types = {p["type"] for p in panels(dashboard) if p["type"] != "row"}
        assert {("panel", kind) for kind in panel_types} <= requires
        assert exported["id"] is None and exported["uid"] == dashboard["uid"]
        # Data source variables default to the imported data sources, not to our uids.
        for variable in exported["templating"]["list"]:
            if variable["type"] == "datasource":
                value = variable["current"]["value"]
                assert re.fullmatch(r"\$\{DS_[A-Z_]+\}", value), value
                assert inputs[value[2:-1]]["pluginId"] == variable["query"]
        # Everything else is the provisioned dashboard.
        stripped = {k: v for k, v in exported.items() if not k.startswith("__") and k != "id"}
        for variable in stripped["templating"]["list"]:
            if variable["type"] == "datasource":
                variable["current"] = {}
        original = json.loads(json.dumps(dashboard))
        for variable in original["templating"]["list"]:
            if variable["type"] == "datasource":
                variable["current"] = {}
        assert stripped == original
        grafana = compose_services()["grafana"]["image"].rsplit(":", 1)[1]
        (version,) = [r["version"] for r in exported["__requires"] if r["type"] == "grafana"]
        assert version == grafana


def test_dashboard_has_events_and_errors_from_loki_and_a_cluster_row() -> None:
    for dashboard in dashboards().values():
        logs = [p for p in panels(dashboard) if p["type"] == "logs"]
        assert [p["title"] for p in logs] == ["Events and errors"]
        (target,) = logs[0]["targets"]
        assert target["datasource"]["type"] == "loki"
        assert 'service_name="$service"' in target["expr"]
        titles = [p["title"] for p in panels(dashboard)]
        cluster = titles.index("Cluster")
        after = " ".join(titles[cluster:])
        assert "Dask's own metrics" in after and "Collector" in after


def resolve_datasource(
    datasource: Mapping[str, str],
    ds_vars: Mapping[str, Mapping[str, Any]],
    provisioned: Mapping[str, str],
) -> str:
    """The provisioned uid a panel's data source is, through datasource variables."""
    uid = datasource["uid"]
    match = re.fullmatch(r"\$\{(\w+)\}|\$(\w+)", uid)
    if match:
        uid = ds_vars[match[1] or match[2]]["current"]["value"]
    assert provisioned.get(uid) == datasource["type"], datasource
    return uid


def test_dashboards_are_structurally_valid() -> None:
    provisioned = {d["uid"]: d["type"] for d in datasources()}
    uids = set()
    for name, dashboard in dashboards().items():
        uids.add(dashboard["uid"])
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        ds_vars = {n: v for n, v in variables.items() if v["type"] == "datasource"}
        for ds_var in ds_vars.values():
            assert provisioned[ds_var["current"]["value"]] == ds_var["query"], ds_var["name"]

        ids = [p["id"] for p in panels(dashboard)]
        assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
        boxes = []
        for panel in panels(dashboard):
            grid = panel["gridPos"]
            assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
            boxes.append((grid["x"], grid["y"], grid["w"], grid["h"], panel["title"]))
            if panel["type"] == "row":
                continue
            resolve_datasource(panel["datasource"], ds_vars, provisioned)
            assert panel["targets"], panel["title"]
            assert panel["description"], panel["title"]
            for target in panel["targets"]:
                resolve_datasource(target["datasource"], ds_vars, provisioned)
                assert target["expr"].strip() and target["refId"]
        for i, (x, y, w, h, title) in enumerate(boxes):
            for x2, y2, w2, h2, title2 in boxes[i + 1 :]:
                overlap = x < x2 + w2 and x2 < x + w and y < y2 + h2 and y2 < y + h
                assert not overlap, f"{name}: {title!r} overlaps {title2!r}"

        # Every $var used anywhere is defined (or one of Grafana's built-ins).
        used = variable_names(json.dumps(dashboard["panels"]))
        for variable in variables.values():
            used |= variable_names(variable_query(variable))
        assert used - BUILTIN_VARIABLES <= set(variables), used - set(variables)
        # Variable queries: label_values(...) over defined variables only, and each
        # variable refers only to variables defined before it (Grafana's order).
        seen: set[str] = set()
        for variable in variables.values():
            if variable["type"] == "query":
                query = variable_query(variable)
                assert LABEL_VALUES.fullmatch(query), query
                assert variable_names(query) <= seen, (variable["name"], query)
                assert variable.get("definition", query) == query
            seen.add(variable["name"])
        for wanted in ("workflow", "span", "prefix"):
            assert wanted in variables
        assert "dask_span_root" in variable_query(variables["workflow"])
        assert variable_query(variables["span"]).endswith("dask_span_name)")
        assert variable_query(variables["prefix"]).endswith("dask_task_prefix)")
    assert len(uids) == len(dashboards())


def decode_explore_link(url: str, values: Mapping[str, str]) -> dict[str, Any]:
    """Interpolate a data link like Grafana does and decode its Explore panes."""

    def value(match: re.Match[str]) -> str:
        name, fmt = match[1], match[2]
        raw = values[name]
        return urllib.parse.quote(raw, safe="") if fmt == "percentencode" else raw

    interpolated = re.sub(r"\$\{(\w+)(?::(\w+))?\}", value, url)
    parts = urllib.parse.urlsplit(interpolated)
    assert parts.path == "/explore", url
    (panes,) = urllib.parse.parse_qs(parts.query)["panes"]
    decoded: dict[str, Any] = json.loads(panes)
    return decoded


def test_every_panel_links_to_the_traces_of_the_selected_workflow() -> None:
    provisioned = {d["uid"]: d["type"] for d in datasources()}
    # Awkward values: the link must survive spaces, &, # and + in a workflow name.
    workflow, service = "nightly training & co #2+", "dask"
    for dashboard in dashboards().values():
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        values = {n: v["current"].get("value", "") for n, v in variables.items()}
        values |= {"workflow": workflow, "service": service, "__from": "1", "__to": "2"}
        for panel in panels(dashboard):
            if panel["type"] == "row":
                continue
            links = panel["fieldConfig"]["defaults"]["links"]
            kinds = set()
            for link in links:
                assert variable_names(link["url"]) <= set(variables) | BUILTIN_VARIABLES
                (pane,) = decode_explore_link(link["url"], values).values()
                (query,) = pane["queries"]
                uid = pane["datasource"]
                assert uid == query["datasource"]["uid"]
                kind = provisioned[uid]
                assert kind == query["datasource"]["type"]
                kinds.add(kind)
                if kind == "tempo":
                    assert query["queryType"] == "traceql"
                    assert f'resource.service.name="{service}"' in query["query"]
                    assert f'name="{workflow}"' in query["query"]
                else:
                    assert (query["service"], query["operation"]) == (service, workflow)
            assert kinds == {"tempo", "jaeger"}, panel["title"]
        for link in dashboard.get("links", []):
            host, port, _ = host_port(link["url"].split("?")[0])
            published = [str(p) for p in compose_services()["jaeger"]["ports"]]
            assert host == "localhost" and any(p.endswith(f":{port}") for p in published)


# -- metric names: OTLP translation and the documented contract -------------------------
def expr_label_names(expr: str) -> set[str]:
    labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"", expr))
    for group in re.findall(r"\bby\s*\(([^)]*)\)", expr):
        labels |= {label.strip() for label in group.split(",") if label.strip()}
    return labels


def test_otlp_translation_port_reproduces_known_names() -> None:
    # Examples from prometheus/otlptranslator's own documentation.
    assert (
        otlp_prometheus_name("http.server.duration", "s", False) == "http_server_duration_seconds"
    )
    assert otlp_prometheus_name("requests.count", "1", True) == "requests_count_total"
    assert otlp_prometheus_name("memory.usage", "By", False) == "memory_usage_bytes"
    assert otlp_prometheus_name("dask.span.output", "By", True) == "dask_span_output_bytes_total"
    assert otlp_prometheus_name("x.bytes", "By", True) == "x_bytes_total"


def test_dashboards_use_the_otlp_names_of_otel_spans_instruments() -> None:
    known_metrics = expected_metric_names()
    attributes = list(semconv.METRIC_ATTRIBUTES)
    known_labels = {otlp_label_name(a) for a in attributes}
    # job/instance: set by Prometheus; le: histogram buckets; the promoted resource
    # attributes (prometheus.yml otlp block, static labels of the scrape job).
    known_labels |= {"job", "instance", "le"}
    known_labels |= {
        otlp_label_name(a)
        for a in load_yaml(PROMETHEUS_FILE)["otlp"]["promote_resource_attributes"]
    }
    contract = (ROOT / "docs" / "telemetry.md").read_text()
    sources = [t["expr"] for _, _, t in all_exprs()]
    for dashboard in dashboards().values():
        sources += [
            variable_query(v) for v in dashboard["templating"]["list"] if v["type"] == "query"
        ]
    for source in datasources():
        sources += [
            q["query"]
            for q in source.get("jsonData", {}).get("tracesToMetrics", {}).get("queries", [])
        ]
    used_metrics: set[str] = set()
    for expr in sources:
        if is_native(expr):
            assert expr_label_names(expr) <= NATIVE_LABELS | known_labels, expr
            continue
        used_metrics |= expr_metric_names(expr)
        assert expr_label_names(expr) <= known_labels, (expr, expr_label_names(expr) - known_labels)
    used_metrics -= recorded_names()  # the alert file's, from these instruments
    assert used_metrics <= known_metrics, used_metrics - known_metrics
    for metric in used_metrics:
        base = re.sub(r"_(bucket|sum|count)$", "", metric) if "duration" in metric else metric
        assert f"`{base}`" in contract, f"{base} is not in docs/telemetry.md"
    # Each of the brief's signals has a panel.
    for metric in (
        "dask_span_duration_seconds_sum",
        "dask_span_cpu_available_seconds_total",
        "dask_span_cost_total",
        "dask_span_execute_time_seconds_total",
        "dask_span_tasks_total",
        "dask_span_output_bytes_total",
        "otel_spans_records_total",
        "otel_spans_cardinality_overflow_total",
        "otel_spans_internal_errors_total",
    ):
        assert metric in used_metrics, metric


# -- Kubernetes and README ---------------------------------------------------------------
def readme_env_blocks() -> dict[str, dict[str, str]]:
    """``export OTEL_*``/``DASK_*`` lines of each fenced block, by the heading above it."""
    blocks: dict[str, dict[str, str]] = {}
    heading = ""
    for match in re.finditer(
        r"^(#+ [^\n]+)$|^```\w*\n(.*?)^```", DEPLOY_README.read_text(), re.M | re.S
    ):
        if match[1]:
            heading = match[1].lstrip("# ").strip()
            continue
        env = dict(re.findall(r"^export ((?:OTEL|DASK)_\w+)=['\"]?([^'\"\n]*)", match[2], re.M))
        if env:
            blocks[heading] = env
    return blocks


def test_readme_environment_examples_resolve() -> None:
    blocks = readme_env_blocks()
    cloud = next(env for heading, env in blocks.items() if "Grafana Cloud" in heading)
    settings = otel_spans_settings(cloud)
    target = settings.traces.target
    assert target.kind == "otlp" and target.protocol == "http/protobuf"
    assert str(target.endpoint).endswith("/otlp/v1/traces")
    assert target.headers["authorization"].startswith("Basic ")
    user, _, token = target.headers["authorization"].removeprefix("Basic ").partition(" ")
    assert not token and base64.b64decode(user).decode() == "123456:glc_example"
    pull = next(env for heading, env in blocks.items() if "scraping" in heading)
    settings = otel_spans_settings(pull)
    assert settings.metrics.prometheus_port == 9464
    assert settings.traces.target.kind == "none"
    assert len(blocks) >= 3
    config._WARNED.clear()
    for env in blocks.values():
        otel_spans_settings(env)  # raises ConfigError on a bad dask.config example
    assert not config._WARNED, f"README examples set ignored OTEL_* values: {config._WARNED}"


# -- live: a real Dask run, scraped by a real Prometheus --------------------------------
@dataclass
class Live:
    prometheus: PrometheusServer
    job: str
    started: float
    results: list[dict[str, float]]


SCRAPE_INTERVAL_S = 1


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """The demo workflow on a LocalCluster, its scheduler scraped by Prometheus.

    Module-scoped (the cluster and Prometheus start once), so it builds the
    PrometheusServer itself rather than through the function-scoped ``prometheus``
    fixture, with the same teardown. The scrape jobs are deploy/prometheus.yml's, only
    their targets and interval changed: otel-spans' endpoint on the scheduler, Dask's
    own /metrics of the scheduler and the workers, and the self-metrics of a real
    collector (collector-config.yaml) that the scheduler exports to over OTLP (its
    backends are a recording OTLP receiver).
    """
    from distributed import Client, LocalCluster

    run_demo = load_module(DEPLOY / "run_demo.py")
    job_name = "dask-scheduler"
    jobs = {j["job_name"]: j for j in load_yaml(PROMETHEUS_FILE)["scrape_configs"]}
    job = jobs[job_name]
    stack = contextlib.ExitStack()
    backend = stack.enter_context(OtlpReceiver())
    otelcol_binary()
    collector = OtelcolServer(
        COLLECTOR_FILE,
        {
            "JAEGER_OTLP_ENDPOINT": f"127.0.0.1:{backend.grpc_port}",
            "TEMPO_OTLP_ENDPOINT": f"127.0.0.1:{backend.grpc_port}",
            "PROMETHEUS_OTLP_ENDPOINT": backend.http_endpoint,
            "LOKI_OTLP_ENDPOINT": backend.http_endpoint,
        },
    )
    stack.enter_context(collector)
    config = {
        "distributed.scheduler.preload": ["otel_spans"],
        "otel-spans.metrics.prometheus-port": 0,
        "otel-spans.metrics.prometheus-host": "127.0.0.1",
        "otel-spans.metrics.interval": "500ms",
        "otel-spans.metrics.cpu-hour-price": 0.05,
        # Final values (the root's idle share) soon after the spans end.
        "otel-spans.metrics.settle": "1s",
        "otel-spans.traces.linger": "200ms",
        "otel-spans.traces.batch-wait": "200ms",
        "otel-spans.endpoint": collector.otlp_grpc_endpoint,
        "otel-spans.directory": str(tmp_path_factory.mktemp("otel-spans-data")),
    }
    server: PrometheusServer | None = None
    with (
        stack,
        dask.config.set(config),
        LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as client,  # type: ignore[no-untyped-call]
    ):
        try:
            stats = client.run_on_scheduler(
                lambda dask_scheduler: dask_scheduler.plugins["otel-spans"].stats()
            )
            scrape = {
                **job,
                "scrape_interval": f"{SCRAPE_INTERVAL_S}s",
                "scrape_timeout": f"{SCRAPE_INTERVAL_S}s",
                "static_configs": [
                    {
                        **job["static_configs"][0],
                        "targets": [f"127.0.0.1:{stats['prometheus_port']}"],
                    }
                ],
            }
            workers = client.run(lambda dask_worker: dask_worker.http_server.port)
            scheduler_http = cluster.scheduler.http_server.port

            def rescrape(name: str, targets: list[str]) -> dict[str, Any]:
                base = {k: v for k, v in jobs[name].items() if not k.endswith("_sd_configs")}
                labels = (jobs[name].get("static_configs") or [{}])[0].get("labels", {})
                return {
                    **base,
                    "scrape_interval": f"{SCRAPE_INTERVAL_S}s",
                    "scrape_timeout": f"{SCRAPE_INTERVAL_S}s",
                    "static_configs": [{"targets": targets, "labels": labels}],
                }

            scrapes = [
                scrape,
                rescrape("dask-scheduler-native", [f"127.0.0.1:{scheduler_http}"]),
                rescrape("dask-workers-native", [f"127.0.0.1:{p}" for p in workers.values()]),
                rescrape("otel-collector", [f"127.0.0.1:{collector.metrics_port}"]),
            ]
            prom = server = PrometheusServer(
                scrape_interval=f"{SCRAPE_INTERVAL_S}s", extra_config={"scrape_configs": scrapes}
            ).start()
            up = f'up{{job="{job_name}"}}'
            # Prometheus scrapes for the first time ~5.5 s after it starts; the workflow
            # runs after that, so that rates see its counters grow, as in production.
            prom.wait_for_query(f"{up} == 1", timeout=30)
            started = time.time()
            results = run_demo.run(cluster.scheduler_address, runs=1, workers=2)
            needed = {m for _, _, t in all_exprs() for m in expr_metric_names(t["expr"])}
            needed -= recorded_names()  # recorded by the alert rules, which this one lacks

            def missing() -> set[str]:
                names = prom.api("label/__name__/values", {"match[]": f'{{job="{job_name}"}}'})
                return needed - set(names)

            def everything_scraped() -> bool:
                # The root's idle share is reported last, once the values are final.
                idle = 'dask_span_execute_time_seconds_total{dask_activity="idle or other spans"}'
                native = [
                    "dask_scheduler_workers",
                    "dask_worker_memory_bytes",
                    '{__name__=~"otelcol_exporter_sent_spans(_total)?"}',
                ]
                return not missing() and all(prom.query(q) for q in [idle, *native])

            wait_until(everything_scraped, timeout=45, interval=0.5, message=lambda: f"{missing()}")
            # One more scrape after that, so the final values are in every rate window.
            after = time.time() + SCRAPE_INTERVAL_S
            prom.wait_for_query(f"timestamp({up}) > {after}", timeout=10)
            yield Live(prom, job_name, started, results)
        finally:
            if server is not None:
                server.stop()
                print(f"--- prometheus log ---\n{server.log_text()[-20000:]}")
                server.close()


def builtins_for(live: Live) -> dict[str, str]:
    span = math.ceil(time.time() - live.started) + 10
    # Grafana: $__rate_interval = max($__interval + scrape interval, 4 x scrape interval).
    return {
        "__range": f"{span}s",
        "__rate_interval": f"{4 * SCRAPE_INTERVAL_S}s",
        "__interval": f"{SCRAPE_INTERVAL_S}s",
    }


def run_target(live: Live, expr: str, instant: bool) -> list[list[float]]:
    """Values per series: [value] for an instant query, the points of a range query."""
    if instant:
        return [[float(r["value"][1])] for r in live.prometheus.query(expr)]
    data = live.prometheus.api(
        "query_range",
        {"query": expr, "start": repr(live.started - 5), "end": repr(time.time()), "step": "1"},
    )
    assert data["resultType"] == "matrix"
    return [[float(v) for _, v in r["values"]] for r in data["result"]]


def test_the_demo_ran(live: Live) -> None:
    (result,) = live.results
    assert result["records_ok"] == 4  # one record of five is corrupt: the handled failure


def test_template_variables_resolve_to_real_values(live: Live) -> None:
    for name, dashboard in dashboards().items():
        resolved = resolve_variables(live.prometheus, dashboard, builtins_for(live))
        assert resolved.values["job"] == live.job, name
        assert resolved.values["service"] == semconv.DEFAULT_SERVICE_NAME
        assert resolved.options["workflow"] == ["nightly training"]
        assert "nightly training/model" in resolved.options["span"]
        assert {"slow", "fragile", "random"} <= set(resolved.options["prefix"])


#: Every dashboard expression a test's Prometheus can answer: not those that read a
#: series the alert file records over 7 days (no test's Prometheus runs those rules;
#: ``promtool test rules`` tests them, and the run-time panel is the only one).
EXPRS = [e for e in all_exprs() if not reads_recorded(e[2]["expr"])]


@pytest.mark.parametrize(
    ("dashboard", "panel", "target"),
    EXPRS,
    ids=[f"{p['title']}[{t['refId']}]" for _, p, t in EXPRS],
)
def test_dashboard_expression_returns_data(
    live: Live, dashboard: str, panel: dict[str, Any], target: dict[str, Any]
) -> None:
    builtins = builtins_for(live)
    resolved = resolve_variables(live.prometheus, dashboards()[dashboard], builtins)
    expr = resolved.interpolate(target["expr"], builtins)
    assert "$" not in expr, expr
    series = run_target(live, expr, target["instant"])
    assert series, f"{panel['title']}: no data for {expr}"
    assert any(math.isfinite(v) for values in series for v in values), (expr, series)


def test_dashboard_expressions_with_one_span_and_prefix_return_data(live: Live) -> None:
    """Not only "All": one real span and prefix, those of the erred task."""
    erred = live.prometheus.query('dask_span_tasks_total{dask_task_state="erred"}')
    assert erred, "the demo's failing task left no erred series"
    labels = erred[0]["metric"]
    chosen = {"span": labels["dask_span_name"], "prefix": labels["dask_task_prefix"]}
    assert chosen == {"span": "nightly training/model", "prefix": "fragile"}
    empty = []
    builtins = builtins_for(live)
    for name, dashboard in dashboards().items():
        resolved = resolve_variables(live.prometheus, dashboard, builtins, chosen)
        for _, panel, target in (e for e in EXPRS if e[0] == name):
            expr = resolved.interpolate(target["expr"], builtins)
            if not reads_recorded(expr) and not run_target(live, expr, target["instant"]):
                empty.append(f"{panel['title']}: {expr}")
    assert not empty, "\n".join(empty)


def test_traces_to_metrics_queries_return_data(live: Live) -> None:
    queries = [
        q["query"]
        for source in datasources()
        for q in source.get("jsonData", {}).get("tracesToMetrics", {}).get("queries", [])
    ]
    assert queries
    for query in queries:
        # $$ in provisioning files is a literal $; $__tags becomes the span's tags.
        expr = query.replace("$$__tags", f'job="{live.job}"')
        assert live.prometheus.query(expr), expr


def test_the_pull_endpoint_serves_exactly_the_otlp_names(live: Live) -> None:
    """The names both metrics paths produce are the same, so the dashboards fit both."""
    scraped = set(
        live.prometheus.api("label/__name__/values", {"match[]": f'{{job="{live.job}"}}'})
    )
    ours = {n for n in scraped if n.startswith(("dask_", "otel_spans_"))}
    assert ours, scraped
    expected = expected_metric_names()
    assert ours <= expected, ours - expected
    # p2p metrics appear only with P2P shuffles, which the demo does not run.
    assert expected - ours <= {n for n in expected if "_p2p_" in n}, expected - ours
    labels = set(
        live.prometheus.api("labels", {"match[]": f'{{__name__=~"dask_.*", job="{live.job}"}}'})
    )
    attributes = {otlp_label_name(v) for v in semconv.METRIC_ATTRIBUTES}
    assert {"dask_span_name", "dask_span_root", "dask_task_prefix", "dask_activity"} <= labels
    assert (
        labels
        - {"__name__", "job", "instance", "le", "service_name", "dask_cluster_name"}
        - {
            "otel_scope_name",
            "otel_scope_version",
            "otel_scope_schema_url",
        }
        <= attributes
    )


def test_readme_walk_through_matches_the_files() -> None:
    """Versions, ports and file names the README states are the ones in the files."""
    readme = DEPLOY_README.read_text()
    services = compose_services()
    for name, service in services.items():
        if "image" in service and "build" not in service:
            assert f"`{service['image']}" in readme, f"{name}: {service['image']}"
    published = {str(p).split(":")[-2] for s in services.values() for p in s.get("ports", [])}
    match = re.search(r"ports ([\d, and\n]+) free", readme)
    assert match, "the README lists the published ports"
    stated = set(re.findall(r"\d+", match[1]))
    assert stated == published, stated ^ published
    for path in re.findall(r"\| `([\w./*-]+)`", readme):
        if "*" in path or path.startswith("grafana/"):
            continue
        assert (DEPLOY / path).exists() or (ROOT / path).exists(), path
    generator = load_module(DEPLOY / "kubernetes" / "generate_observability.py")
    assert services["collector"]["image"] == generator.COLLECTOR_IMAGE
    assert services["loki"]["image"] == generator.LOKI_IMAGE
