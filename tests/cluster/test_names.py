"""A name no encoder accepts and a megabyte name, on a one-process cluster, where they
reach the scheduler as the client's own strings (docs/telemetry.md, Limits).

Over ``inproc://`` nothing re-encodes a ``distributed.span`` name on its way: a lone
surrogate arrives as it is. Each of spans, metric labels and the workflows page must
show the name made valid UTF-8 and cut to its documented length, and no logger may
report a failure (before, the SDK's metric encoder logged a traceback for every point
of every export and dropped the label).
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import dask.config
import pytest
from distributed import Client, LocalCluster, Scheduler, span
from distributed.utils import key_split

from otel_spans.markup import escape
from otel_spans.names import LABEL_LENGTH
from otel_spans.scheduler import workflows_page
from otel_spans.settings import DEFAULT_MAX_ATTRIBUTE_LENGTH
from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.cluster import FAST, FAST_METRICS, await_until, cluster_test, stats
from tests.support.received import dask_spans
from tests.support.tasks import inc

pytestmark = pytest.mark.usefixtures("default_otel_config")

#: A workflow name holding a lone surrogate, and what every output shows instead.
SURROGATE = "lone-\ud800-surrogate"
SURROGATE_SHOWN = "lone-\ufffd-surrogate"
#: A workflow name of a million characters.
HUGE = "m" * 1_000_000
#: A task key holding a lone surrogate, its task prefix, and what outputs show.
KEY = "odd\udc80key-0"
KEY_SHOWN = "odd\ufffdkey-0"
PREFIX_SHOWN = "odd\ufffdkey"
#: What a log message says when something failed.
FAILURES = ("Traceback", "Failed to encode", "UnicodeEncodeError")


@asynccontextmanager
async def one_process_cluster(config: Mapping[str, Any]) -> AsyncIterator[tuple[Client, Scheduler]]:
    """``LocalCluster(processes=False)`` with the preload: client, scheduler and worker
    share one process and talk over ``inproc://``."""
    full = {"distributed.scheduler.preload": ["otel_spans"], **FAST, **FAST_METRICS, **config}
    with dask.config.set(full):
        async with (
            LocalCluster(
                processes=False,
                n_workers=1,
                threads_per_worker=1,
                asynchronous=True,
                dashboard_address=":0",
            ) as cluster,
            Client(cluster, asynchronous=True) as client,
        ):
            assert cluster.scheduler_address.startswith("inproc://")
            assert cluster.scheduler is not None
            yield client, cluster.scheduler


def fetch(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.headers["Content-Type"], response.read()


def label_values(receiver: OtlpReceiver, key: str) -> set[str]:
    return {p.attributes[key] for p in receiver.metrics() if key in p.attributes}


@cluster_test(120)
async def test_a_lone_surrogate_and_a_megabyte_name_are_safe_everywhere(
    otlp_receiver: OtlpReceiver,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    # distributed's and tornado's loggers keep their records to themselves: every
    # logger's records must reach the capture (a page's 500 is logged by tornado's)
    for logger in [logging.getLogger(n) for n in list(logging.Logger.manager.loggerDict)]:
        if not logger.propagate:
            monkeypatch.setattr(logger, "propagate", True)
    config = {
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.traces.tasks.mode": "all",
    }
    max_length = DEFAULT_MAX_ATTRIBUTE_LENGTH
    huge_span, huge_label = HUGE[:max_length], HUGE[:LABEL_LENGTH]
    async with one_process_cluster(config) as (client, scheduler):
        with span(SURROGATE):
            assert await client.submit(inc, 1, key=KEY) == 2
        with span(HUGE):
            assert await client.submit(inc, 2, key="inc-huge") == 3

        def exported() -> bool:
            names = {s.name for s in dask_spans(otlp_receiver)}
            labels = label_values(otlp_receiver, "dask.span.name")
            return {SURROGATE_SHOWN, huge_span} <= names and {
                SURROGATE_SHOWN,
                huge_label,
            } <= labels

        await await_until(exported, 30, "both workflows exported as spans and metrics")
        base = f"http://127.0.0.1:{scheduler.http_server.port}{workflows_page.PATH}"
        html = await asyncio.to_thread(fetch, base)
        as_json = await asyncio.to_thread(fetch, f"{base}?format=json")
        # one more metrics export with both series in it, after the page was read
        exports = len(otlp_receiver.records("metrics"))
        await await_until(lambda: len(otlp_receiver.records("metrics")) >= exports + 2, 30)
        assert (await stats(client))["internal_errors"] == 0

    # spans: the name made valid and cut to max-attribute-length, tags alike
    by_tags = {tuple(s.attributes["dask.span.tags"]): s for s in dask_spans(otlp_receiver)}
    assert by_tags[(SURROGATE_SHOWN,)].name == SURROGATE_SHOWN
    assert by_tags[(huge_span,)].name == huge_span
    (task,) = [s for s in otlp_receiver.spans() if s.attributes.get("dask.task.key") == KEY_SHOWN]
    assert key_split(KEY) == PREFIX_SHOWN.replace("\ufffd", "\udc80")  # Dask's prefix
    assert task.attributes["dask.task.prefix"] == PREFIX_SHOWN

    # metrics: every label there, made valid and cut to the label length
    names = label_values(otlp_receiver, "dask.span.name")
    assert {SURROGATE_SHOWN, huge_label} <= names
    assert label_values(otlp_receiver, "dask.span.root") >= {SURROGATE_SHOWN, huge_label}
    assert max(len(n) for n in names) == LABEL_LENGTH
    prefixes = label_values(otlp_receiver, "dask.task.prefix")
    assert PREFIX_SHOWN in prefixes

    # the page: 200, valid UTF-8, names as the metric label shows them, bounded
    status, content_type, body = html
    assert status == 200 and content_type.startswith("text/html")
    page = body.decode("utf-8")
    assert escape(SURROGATE_SHOWN) in page and escape(huge_label) in page
    assert huge_label + "m" not in page
    assert len(body) < workflows_page.MAX_BODY_BYTES
    status, content_type, body = as_json
    assert status == 200 and content_type.startswith("application/json")
    rows = {r["name"]: r for r in json.loads(body.decode("utf-8"))["workflows"]}
    assert set(rows) == {SURROGATE_SHOWN, huge_label}
    assert all(r["status"] == "finished" and r["tasks"] == {"memory": 1} for r in rows.values())
    assert len(body) < workflows_page.MAX_BODY_BYTES

    # no logger reported a failure: no traceback, no encoding error
    failures = [
        f"{r.name}: {r.getMessage()[:200]}"
        for r in caplog.records
        if r.exc_info or any(text in r.getMessage() for text in FAILURES)
    ]
    assert failures == []
