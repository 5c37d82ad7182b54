"""The OTel resource every signal of a process carries."""

from __future__ import annotations

import functools
import os

from opentelemetry.sdk.environment_variables import (
    OTEL_EXPERIMENTAL_RESOURCE_DETECTORS,
    OTEL_RESOURCE_ATTRIBUTES,
    OTEL_SERVICE_NAME,
)
from opentelemetry.sdk.resources import Resource

from otel_spans import __version__, semconv
from otel_spans.settings import Settings


def build_resource(settings: Settings, *, instance_id: str, scheduler_address: str) -> Resource:
    """The resource of every signal this process exports.

    ``Resource.create`` merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; explicit
    otel-spans settings win over both, and ``dask`` replaces the SDK's
    ``unknown_service`` placeholder. ``telemetry.distro.*`` says which distribution
    made the bytes: the SDK's ``telemetry.sdk.*`` stay, but the spans and logs are
    encoded by otel-spans.
    """
    attributes: dict[str, str] = dict(settings.resource_attributes)
    attributes[semconv.SERVICE_INSTANCE_ID] = instance_id
    attributes[semconv.DASK_SCHEDULER_ADDRESS] = scheduler_address
    attributes[semconv.DASK_VERSION] = _dask_version()
    attributes[semconv.TELEMETRY_DISTRO_NAME] = semconv.DISTRO_NAME
    attributes[semconv.TELEMETRY_DISTRO_VERSION] = __version__
    if settings.cluster_name:
        attributes[semconv.DASK_CLUSTER_NAME] = settings.cluster_name
    if settings.service_namespace:
        attributes[semconv.SERVICE_NAMESPACE] = settings.service_namespace
    if settings.service_name:
        attributes[semconv.SERVICE_NAME] = settings.service_name
    # What Resource.create(attributes) returns, without running its detectors (and
    # their entry-point scan of every installed package) once per cluster start.
    detected = _detected(*(os.environ.get(name) for name in _ENVIRONMENT))
    resource = detected.merge(Resource(attributes))
    if not resource.attributes.get(semconv.SERVICE_NAME):
        resource = resource.merge(Resource({semconv.SERVICE_NAME: semconv.DEFAULT_SERVICE_NAME}))
    return resource


#: What the SDK's detectors read; the detected resource is cached per their values.
_ENVIRONMENT = (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME, OTEL_EXPERIMENTAL_RESOURCE_DETECTORS)


@functools.lru_cache(maxsize=8)
def _detected(*environment: str | None) -> Resource:
    """What the SDK's detectors find, which read only the process and the environment's
    values ``environment`` (the cache key): ``Resource.create()`` less the
    ``unknown_service`` placeholder it adds when they name no service."""
    created = Resource.create()
    name = created.attributes.get(semconv.SERVICE_NAME)
    if not str(name).startswith("unknown_service"):
        return created
    kept = {k: v for k, v in created.attributes.items() if k != semconv.SERVICE_NAME}
    return Resource(kept, created.schema_url)


@functools.cache
def _dask_version() -> str:
    """distributed's version, read once: ``importlib.metadata`` scans ``sys.path``."""
    from importlib.metadata import version

    return version("distributed")
