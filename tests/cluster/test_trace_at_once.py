"""A workflow's trace id is known at once: on the client before anything runs, and at
the collector (a ``dask.span.started`` log record) while the workflow still runs."""

from __future__ import annotations

import logging
import uuid

import dask.config
import pytest
from distributed import Event
from distributed import span as dask_span

import otel_spans
from otel_spans import ids
from otel_spans.config import ConfigError, Settings
from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.cluster import FAST, await_until, cluster_test, traced_cluster
from tests.support.tasks import wait_for

TEMPLATE = "http://jaeger:16686/trace/{trace_id}?root={span_id}"


pytestmark = pytest.mark.usefixtures("default_otel_config")


@pytest.mark.parametrize(
    ("template", "allowed"),
    [
        ("http://jaeger/trace", r"\{trace_id\}"),
        ("http://jaeger/{trace}", r"\{trace_id\}"),
        ("http://x/{trace_id}/{0}", r"\{trace_id\}"),
        (5, "a non-empty string"),
    ],
)
def test_a_bad_trace_url_names_the_key_and_what_is_allowed(template: object, allowed: str) -> None:
    with pytest.raises(ConfigError, match=rf"otel-spans\.trace-url: invalid value .*{allowed}"):
        Settings.from_config({"trace-url": template}, environ={})


def test_the_client_knows_the_trace_of_a_root_before_it_runs() -> None:
    """No cluster at all: the id is derived from the Dask span's uuid, as the
    scheduler derives it (tests/unit/test_ids.py pins the scheme)."""
    with dask.config.set({"otel-spans.trace-url": TEMPLATE}):
        assert otel_spans.trace_id() is None  # outside any Dask span
        with otel_spans.span("nightly") as root_id, dask_span("stage") as stage_id:
            inside = otel_spans.trace_id()
            url = otel_spans.trace_url()
            assert otel_spans.trace_id(stage_id) == inside
        expected = f"{ids.workflow_trace_id(root_id):032x}"
        assert inside == expected == otel_spans.trace_id(root_id)
        assert url == TEMPLATE.format(
            trace_id=expected, span_id=f"{ids.dask_span_id(root_id):016x}"
        )


def test_under_a_caller_the_trace_is_the_callers() -> None:
    caller = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    with otel_spans.span("called", traceparent=caller, link=False) as root_id:
        assert otel_spans.trace_id() == "ab" * 16
    assert otel_spans.trace_id(root_id) == "ab" * 16  # remembered after the block


@cluster_test(timeout=90)
async def test_the_collector_has_the_trace_id_while_the_workflow_runs(
    otlp_receiver: OtlpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    """The workflow's only task is held by an Event until the test has seen the record,
    so "while it runs" holds by construction, not by a task outlasting the wait.

    Catches: the record sent with the root's span at its end (not at once); a record
    whose trace or span id differs from the root's or the client's; a URL that is not
    the configured template filled with the root's ids."""
    gate = f"gate-{uuid.uuid4()}"
    config = {
        **FAST,
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.trace-url": TEMPLATE,
    }
    with caplog.at_level(logging.INFO, logger="otel_spans"):
        async with traced_cluster(config) as (client, _, _):
            with otel_spans.span("nightly") as root_id:
                trace = otel_spans.trace_id()
                url = otel_spans.trace_url()
                running = client.submit(wait_for, gate, key="held-1", pure=False)
            (started,) = await await_until(
                lambda: [
                    log for log in otlp_receiver.logs() if log.event_name == "dask.span.started"
                ],
                20,
                "no dask.span.started record",
            )
            assert not running.done()  # held until the line below: still running
            assert not [s for s in otlp_receiver.spans() if s.name == "nightly"]
            await Event(gate, client=client).set()
            assert await running == 1
            (root,) = await await_until(
                lambda: [s for s in otlp_receiver.spans() if s.name == "nightly"], 30, "no root"
            )
    assert started.trace_id == trace == root.trace_id
    assert started.span_id == root.span_id
    assert started.attributes["dask.span.id"] == root_id
    assert started.attributes["otel_spans.trace_url"] == url
    assert "url.full" not in started.attributes
    assert url == TEMPLATE.format(trace_id=trace, span_id=root.span_id)
    assert any(url in r.getMessage() and "nightly" in r.getMessage() for r in caplog.records)
