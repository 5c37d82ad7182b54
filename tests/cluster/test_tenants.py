"""Whose workflow it was: user attributes, the client and its OS user on the spans.

On a shared cluster the first question about a slow or costly workflow is whose it was.
The values asserted are the ones the test gives (``attributes=``, the configured
default, the annotation) and the client's own id and OS user.
"""

from __future__ import annotations

import asyncio
import getpass
from typing import Any

import dask
import pytest
from distributed import span as dask_span

import otel_spans
from otel_spans.config import ConfigError, Settings
from tests.servers.otlp_receiver import OtlpReceiver
from tests.servers.otlp_views import ReceivedSpan
from tests.support.cluster import FAST_METRICS, await_until, cluster_test, stats, traced_cluster
from tests.support.received import latest
from tests.support.tasks import inc

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


@pytest.mark.parametrize(
    "value",
    [
        "team",  # not a list
        ["dask.team"],  # otel-spans' own namespace
        ["team", "team"],
        ["a", "b", "c", "d", "e"],  # more than 4
        [["team"]],
    ],
)
def test_bad_attribute_labels_name_the_key(value: Any) -> None:
    with (
        dask.config.set({"otel-spans.metrics.attribute-labels": value}),
        pytest.raises(ConfigError, match=r"otel-spans\.metrics\.attribute-labels: invalid value"),
    ):
        Settings.from_config()


@cluster_test(90)
async def test_allowed_workflow_attributes_label_the_metrics_within_their_budget(
    otlp_receiver: OtlpReceiver,
) -> None:
    """team is allowed (2 values at most), tier is not: a third team is (overflow), a
    workflow without a team has no team label, and no series ever carries tier."""
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        **FAST_METRICS,
        "otel-spans.metrics.attribute-labels": ["team"],
        "otel-spans.metrics.max-attribute-values": 2,
        "otel-spans.metrics.cpu-hour-price": 1.0,
    }
    teams = {"risk report": "risk", "pricing": "quant", "audit": "compliance"}
    async with traced_cluster(config) as (client, _scheduler, workers):
        for i, (name, team) in enumerate(teams.items()):
            with otel_spans.span(name, attributes={"team": team, "tier": 1}):
                assert await client.submit(inc, i, key=f"{name}-inc") == i + 1
        with otel_spans.span("nobody's"):
            assert await client.submit(inc, 10, key="nobody-inc") == 11
        await asyncio.gather(*(w.heartbeat() for w in workers))

        def teams_by_root(name: str) -> dict[str, set[str | None]]:
            out: dict[str, set[str | None]] = {}
            for (metric, attrs), _ in latest(otlp_receiver.metrics()).items():
                a = dict(attrs)
                if metric == name and "dask.span.root" in a:
                    out.setdefault(a["dask.span.root"], set()).add(a.get("team"))
            return out

        expected = {"risk report": {"risk"}, "pricing": {"quant"}, "audit": {"(overflow)"}}
        expected["nobody's"] = {None}
        for metric in ("dask.span.execute.time", "dask.span.tasks", "dask.span.cost"):
            await await_until(lambda m=metric: teams_by_root(m) == expected, 20, metric)
        await await_until(lambda: teams_by_root("dask.task.duration") == expected, 20)
        overflow = {
            dict(attrs).get("otel_spans.attribute"): v
            for (metric, attrs), v in latest(otlp_receiver.metrics()).items()
            if metric == "otel_spans.cardinality.overflow"
        }
        assert overflow["team"] == 1  # one team ("compliance") replaced, once
    assert not any("tier" in p.attributes for p in otlp_receiver.metrics())
