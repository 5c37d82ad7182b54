"""Whose workflow it was: user attributes, the client and its OS user on the spans.

On a shared cluster the first question about a slow or costly workflow is whose it was.
The values asserted are the ones the test gives (``attributes=``, the configured
default, the annotation) and the client's own id and OS user.
"""

from __future__ import annotations

import getpass
from typing import Any

import dask
import pytest
from distributed import span as dask_span

import otel_spans
from otel_spans.config import ConfigError, Settings

from .cluster import await_until, cluster_test, stats, traced_cluster
from .servers.otlp_receiver import OtlpReceiver
from .servers.otlp_views import ReceivedSpan
from .tasks import inc

pytestmark = pytest.mark.usefixtures("default_otel_config")


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"dask.team": "x"}, "names starting with dask. or otel_spans. are otel-spans' own"),
        ({"": "x"}, "expected a non-empty string"),
        ({"team": ["a", "b"]}, "expected a string, boolean, integer or float"),
        ({f"k{i}": i for i in range(33)}, "at most 32 attributes"),
    ],
)
def test_bad_attributes_fail_on_the_client_before_anything_runs(
    attributes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message), otel_spans.span("x", attributes=attributes):
        pytest.fail("the block must not run")


def test_a_nested_span_that_names_a_caller_keeps_the_workflows_attributes() -> None:
    """The inner span's annotation replaces the outer one on the tasks submitted inside:
    the workflow's attributes and user must travel in it too."""
    traceparent = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    with (
        otel_spans.span("workflow", attributes={"team": "risk"}),
        otel_spans.span("stage", traceparent=traceparent),
    ):
        annotation = dask.get_annotations()["otel_spans"]
    assert annotation["traceparent"] == traceparent
    assert annotation["attributes"] == {"team": "risk"}
    assert annotation["user"] == getpass.getuser()


def test_bad_configured_attributes_name_the_key() -> None:
    with (
        dask.config.set({"otel-spans.workflow-attributes": {"team": {"nested": 1}}}),
        pytest.raises(ConfigError, match=r"otel-spans\.workflow-attributes: invalid value"),
    ):
        Settings.from_config()


def by_name(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {s.name: s for s in spans if "dask.span.id" in s.attributes}


@cluster_test()
async def test_workflows_carry_their_tenant_and_who_ran_them(otlp_receiver: OtlpReceiver) -> None:
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.workflow-attributes": {"pipeline": "nightly", "team": "unknown"},
    }
    async with traced_cluster(config) as (client, _scheduler, _workers):
        with (
            otel_spans.span("risk report", attributes={"team": "risk", "tier": 1}),
            dask_span("stage"),
        ):
            assert await client.submit(inc, 1, key="stage-1") == 2
        with dask_span("plain"):
            assert await client.submit(inc, 2, key="plain-1") == 3
        with dask.annotate(otel_spans={"attributes": {"team": "ops"}}), dask_span("annotated"):
            assert await client.submit(inc, 3, key="annotated-1") == 4
        # a malformed annotation is ignored, never an error of the scheduler's
        with dask.annotate(otel_spans={"attributes": {"dask.x": 1}}), dask_span("malformed"):
            assert await client.submit(inc, 4, key="malformed-1") == 5
        names = {"risk report", "stage", "plain", "annotated", "malformed"}

        def all_exported() -> dict[str, ReceivedSpan] | None:
            spans = by_name(otlp_receiver.spans())
            return spans if names <= set(spans) else None

        spans = await await_until(all_exported)
        assert (await stats(client))["internal_errors"] == 0
        client_id = client.id
    user = getpass.getuser()
    root, stage = spans["risk report"].attributes, spans["stage"].attributes
    # given attributes win over configured ones, on every span of the workflow
    assert (root["team"], root["tier"], root["pipeline"]) == ("risk", 1, "nightly")
    assert (stage["team"], stage["tier"], stage["pipeline"]) == ("risk", 1, "nightly")
    # who ran it: on the root only
    assert (root["dask.client.id"], root["dask.client.user"]) == (client_id, user)
    assert "dask.client.id" not in stage and "dask.client.user" not in stage
    plain = spans["plain"].attributes
    assert (plain["team"], plain["pipeline"], plain["dask.client.id"]) == (
        "unknown",
        "nightly",
        client_id,
    )
    assert "dask.client.user" not in plain  # only otel_spans.span sends it
    assert spans["annotated"].attributes["team"] == "ops"
    malformed = spans["malformed"].attributes
    assert malformed["team"] == "unknown" and "dask.x" not in malformed
