"""The OTel resource every signal of a process carries."""

from __future__ import annotations

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
    from importlib.metadata import version

    attributes: dict[str, str] = dict(settings.resource_attributes)
    attributes[semconv.SERVICE_INSTANCE_ID] = instance_id
    attributes[semconv.DASK_SCHEDULER_ADDRESS] = scheduler_address
    attributes[semconv.DASK_VERSION] = version("distributed")
    attributes[semconv.TELEMETRY_DISTRO_NAME] = semconv.DISTRO_NAME
    attributes[semconv.TELEMETRY_DISTRO_VERSION] = __version__
    if settings.cluster_name:
        attributes[semconv.DASK_CLUSTER_NAME] = settings.cluster_name
    if settings.service_namespace:
        attributes[semconv.SERVICE_NAMESPACE] = settings.service_namespace
    if settings.service_name:
        attributes[semconv.SERVICE_NAME] = settings.service_name
    resource = Resource.create(attributes)
    if str(resource.attributes.get(semconv.SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({semconv.SERVICE_NAME: semconv.DEFAULT_SERVICE_NAME}))
    return resource
