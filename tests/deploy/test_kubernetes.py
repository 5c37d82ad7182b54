"""deploy/kubernetes/: every manifest validates against the real schema.

* core objects (observability.yaml: Namespace, ConfigMaps, Deployments, Services) against
  Kubernetes' own OpenAPI schemas as the ``kubernetes-validate`` package ships them,
  strict (unknown fields are errors);
* the DaskCluster against the CRD the ``dask-kubernetes`` package ships (the operator's
  Helm chart CRD), with unknown fields made errors the way ``kubectl --validate=strict``
  reports them, and its pod specs again against the core PodSpec schema;
* the Dask Helm chart values: the chart ships no values schema, so the scheduler and
  worker containers are rendered here the way the chart's templates do (dask/dask,
  templates/dask-{scheduler,worker}-deployment.yaml) and validated as core Pods.

And what the manifests must do: install otel-spans from an image built from this
repository (never by name from an index at pod start), preload it on the scheduler and
the workers with the current ``dask scheduler`` / ``dask worker`` commands (or the
image's wrappers where the Helm chart hard-codes the old names), and export to the
collector that observability.yaml deploys with the same config as compose.
"""

from __future__ import annotations

import copy
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.deploy_env import (
    POD_FIELDS,
    assert_exports_to_a_collector,
    has_preload,
    k8s_env,
    load_module,
    otel_spans_settings,
)
from tests.support.requirements import require_module, unavailable

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
DASK_CLUSTER = KUBERNETES / "daskcluster.yaml"
HELM_VALUES = KUBERNETES / "dask-helm-values.yaml"
OBSERVABILITY = KUBERNETES / "observability.yaml"
KUSTOMIZATION = KUBERNETES / "kustomization.yaml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
#: The Kubernetes version the core objects are validated for.
K8S_VERSION = "1.35.0"
#: The image name kustomization.yaml and the Helm values replace with the built image.
IMAGE = "otel-spans-dask"


def need(module: str) -> Any:
    """Import a schema package; missing: skip (with the reason), or fail in CI."""
    return require_module(module)


def validate_core(manifest: dict[str, Any]) -> None:
    kubernetes_validate = need("kubernetes_validate")
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def as_pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def strict(schema: Any) -> Any:
    """The CRD schema with unknown fields rejected (the API server prunes them silently)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def dask_cluster_crd_schema() -> dict[str, Any]:
    spec = importlib.util.find_spec("dask_kubernetes")
    if spec is None or not spec.submodule_search_locations:
        unavailable("dask-kubernetes", "it ships the DaskCluster CRD (pyproject [test])")
    package = Path(next(iter(spec.submodule_search_locations)))
    crd_file = package / "operator/deployment/helm/dask-kubernetes-operator/crds/daskcluster.yaml"
    crd = yaml.safe_load(crd_file.read_text())
    assert crd["spec"]["names"]["kind"] == "DaskCluster"
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema: dict[str, Any] = copy.deepcopy(version["schema"]["openAPIV3Schema"])
    # Every object has these; the API server validates them, not the CRD's schema.
    schema["properties"] |= {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string", "enum": ["DaskCluster"]},
        "metadata": {"type": "object"},
    }
    return schema


# -- the DaskCluster (Dask Kubernetes operator) -----------------------------------------
def test_daskcluster_validates_against_the_operator_crd() -> None:
    import jsonschema

    manifest = yaml.safe_load(DASK_CLUSTER.read_text())
    assert manifest["apiVersion"] == "kubernetes.dask.org/v1"
    schema = strict(dask_cluster_crd_schema())
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(manifest)]
    assert not errors, "\n".join(errors)
    # The check is real: a misplaced field fails it.
    broken = copy.deepcopy(manifest)
    broken["spec"]["worker"]["replica"] = 2
    assert list(validator.iter_errors(broken))


def test_daskcluster_pod_specs_are_valid_core_pod_specs() -> None:
    manifest = yaml.safe_load(DASK_CLUSTER.read_text())
    for role in ("scheduler", "worker"):
        validate_core(as_pod(role, manifest["spec"][role]["spec"]))


def test_daskcluster_runs_the_built_image_with_current_commands_and_preloads() -> None:
    manifest = yaml.safe_load(DASK_CLUSTER.read_text())
    (scheduler,) = manifest["spec"]["scheduler"]["spec"]["containers"]
    (worker,) = manifest["spec"]["worker"]["spec"]["containers"]
    assert scheduler["args"][:2] == ["dask", "scheduler"]
    assert worker["args"][:2] == ["dask", "worker"]
    name = manifest["metadata"]["name"]
    assert manifest["spec"]["scheduler"]["service"]["selector"]["dask.org/cluster-name"] == name
    for container in (scheduler, worker):
        assert has_preload(container["args"]), container["name"]
        assert_exports_to_a_collector(k8s_env(container))
        assert container["image"].split(":")[0] == IMAGE, container["image"]
        assert otel_spans_settings(k8s_env(container)).cluster_name == name
    # Dask's own /metrics is on the dashboard ports the manifest declares.
    assert "http-dashboard" in {p["name"] for p in scheduler["ports"]}
    assert "8788" in worker["args"]


# -- the Dask Helm chart ----------------------------------------------------------------
def render_helm_container(values: dict[str, Any], role: str) -> dict[str, Any]:
    """The container dask/dask's templates make of ``values`` (chart of 2026-06)."""
    image = values[role]["image"]
    if role == "scheduler":
        args = ["dask-scheduler", "--port=8786", "--dashboard-address=:8787"]
    else:
        args = [image["dask_worker"], "my-dask-scheduler:8786", "--no-dashboard"]
        args += ["--dashboard-address", "8790"]
    return {
        "name": f"my-dask-{role}",
        "image": f"{image['repository']}:{image['tag']}",
        "imagePullPolicy": image.get("pullPolicy", "IfNotPresent"),
        "args": [*args, *values[role].get("extraArgs", [])],
        "env": values[role]["env"],
    }


def test_helm_values_render_valid_pods() -> None:
    values = yaml.safe_load(HELM_VALUES.read_text())
    for role in ("scheduler", "worker"):
        validate_core(as_pod(role, {"containers": [render_helm_container(values, role)]}))


def test_helm_values_use_the_built_image_and_preload_everywhere() -> None:
    values = yaml.safe_load(HELM_VALUES.read_text())
    for role in ("scheduler", "worker"):
        assert has_preload(values[role]["extraArgs"]), role
        assert_exports_to_a_collector(k8s_env(values[role]))
        assert values[role]["image"]["repository"] == IMAGE
        assert re.fullmatch(r"\d+\.\d+\.\d+", str(values[role]["image"]["tag"])), role
        assert values[role]["metrics"]["enabled"] is True  # Dask's own /metrics
    assert otel_spans_settings(k8s_env(values["scheduler"])).metrics.cpu_hour_price == 0.05
    # The chart hard-codes `dask-scheduler` and runs worker.image.dask_worker: the image
    # provides both as wrappers of the current CLI.
    assert values["worker"]["image"]["dask_worker"] == "dask-worker"
    dockerfile = DOCKERFILE.read_text()
    for old, new in (("dask-scheduler", "dask scheduler"), ("dask-worker", "dask worker")):
        assert f"exec {new} " in dockerfile and f"/usr/local/bin/{old}" in dockerfile


@pytest.mark.parametrize("source", ["daskcluster", "helm"])
def test_every_pod_says_where_it_runs_in_its_resource(
    source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The downward API's namespace becomes service.namespace, and the k8s.* and host.*
    resource attributes are there, on the scheduler and on the workers alike."""
    from otel_spans.export.resource import build_resource

    if source == "daskcluster":
        manifest = yaml.safe_load(DASK_CLUSTER.read_text())
        containers = [manifest["spec"][r]["spec"]["containers"][0] for r in ("scheduler", "worker")]
    else:
        values = yaml.safe_load(HELM_VALUES.read_text())
        containers = [values["scheduler"], values["worker"]]
    for container in containers:
        env = k8s_env(container)
        for name in ("OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS"):
            monkeypatch.setenv(name, env[name])
        resource = build_resource(otel_spans_settings(env), instance_id="i", scheduler_address="a")
        attributes = resource.attributes
        assert attributes["service.namespace"] == POD_FIELDS["metadata.namespace"]
        assert attributes["k8s.namespace.name"] == POD_FIELDS["metadata.namespace"]
        assert attributes["k8s.pod.name"] == POD_FIELDS["metadata.name"]
        assert attributes["k8s.node.name"] == POD_FIELDS["spec.nodeName"]
        assert "host.name" in attributes  # the SDK's host detector
        assert attributes["service.name"] == "dask"


def test_no_manifest_installs_packages_by_name_at_pod_start() -> None:
    """EXTRA_PIP_PACKAGES=otel-spans installs whatever an index serves under that name."""
    for path in sorted(KUBERNETES.glob("*.yaml")):
        text = path.read_text()
        for line in text.splitlines():
            if line.lstrip().startswith("#"):
                continue
            assert "EXTRA_PIP_PACKAGES" not in line, f"{path.name}: {line}"
            assert "EXTRA_CONDA_PACKAGES" not in line, f"{path.name}: {line}"


# -- the collector and Loki -------------------------------------------------------------
def observability() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(OBSERVABILITY.read_text()) if d]


def test_observability_manifests_validate_against_kubernetes_schemas() -> None:
    manifests = observability()
    kinds = [m["kind"] for m in manifests]
    assert kinds.count("Deployment") == 2 and kinds.count("Service") == 2
    for manifest in manifests:
        validate_core(manifest)


def test_observability_is_what_its_generator_writes() -> None:
    generator = load_module(KUBERNETES / "generate_observability.py")
    assert OBSERVABILITY.read_text() == generator.render(), (
        "stale: run python deploy/kubernetes/generate_observability.py"
    )


def test_the_collector_runs_the_repository_config_and_reaches_loki() -> None:
    by_kind_name = {(m["kind"], m["metadata"]["name"]): m for m in observability()}
    config_map = by_kind_name[("ConfigMap", "otel-collector")]
    collector_config = ROOT / "deploy" / "collector-config.yaml"
    assert config_map["data"]["config.yaml"] == collector_config.read_text()
    loki = by_kind_name[("ConfigMap", "loki")]
    assert loki["data"]["loki.yaml"] == (ROOT / "deploy" / "loki.yaml").read_text()
    deployment = by_kind_name[("Deployment", "otel-collector")]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    compose = yaml.safe_load((ROOT / "deploy" / "docker-compose.yaml").read_text())
    assert container["image"] == compose["services"]["collector"]["image"]
    (loki_container,) = by_kind_name[("Deployment", "loki")]["spec"]["template"]["spec"][
        "containers"
    ]
    assert loki_container["image"] == compose["services"]["loki"]["image"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["LOKI_OTLP_ENDPOINT"] == "http://loki.observability.svc.cluster.local:3100/otlp"
    service = by_kind_name[("Service", "otel-collector")]
    ports = {p["port"] for p in service["spec"]["ports"]}
    assert {4317, 4318, 8888} <= ports
    # The Dask manifests send to this Service.
    namespace = service["metadata"]["namespace"]
    manifest = yaml.safe_load(DASK_CLUSTER.read_text())
    (scheduler,) = manifest["spec"]["scheduler"]["spec"]["containers"]
    endpoint = k8s_env(scheduler)["OTEL_EXPORTER_OTLP_ENDPOINT"]
    assert endpoint == f"http://otel-collector.{namespace}.svc.cluster.local:4317"
    assert ("Service", "loki") in by_kind_name


def test_kustomization_lists_the_manifests_and_sets_the_image() -> None:
    kustomization = yaml.safe_load(KUSTOMIZATION.read_text())
    for resource in kustomization["resources"]:
        assert (KUBERNETES / resource).is_file(), resource
    assert set(kustomization["resources"]) == {"observability.yaml", "daskcluster.yaml"}
    (image,) = kustomization["images"]
    assert image["name"] == IMAGE and image["newTag"]
