"""The OTel resource every signal of a process carries."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource

from otel_spans import semconv
from otel_spans.settings import Settings


def build_resource(settings: Settings, *, instance_id: str, scheduler_address: str) -> Resource:
    """The resource of every signal this process exports.

    ``Resource.create`` merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; explicit
    otel-spans settings win over both, and ``dask`` replaces the SDK's
    ``unknown_service`` placeholder.
    """
    from importlib.metadata import version

    attributes: dict[str, str] = dict(settings.resource_attributes)
    attributes[semconv.SERVICE_INSTANCE_ID] = instance_id
    attributes[semconv.DASK_SCHEDULER_ADDRESS] = scheduler_address
    attributes[semconv.DASK_VERSION] = version("distributed")
    if settings.cluster_name:
        attributes[semconv.DASK_CLUSTER_NAME] = settings.cluster_name
    if settings.service_name:
        attributes[semconv.SERVICE_NAME] = settings.service_name
    resource = Resource.create(attributes)
    if str(resource.attributes.get(semconv.SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({semconv.SERVICE_NAME: semconv.DEFAULT_SERVICE_NAME}))
    return resource
