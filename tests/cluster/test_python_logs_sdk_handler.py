"""An OTel ``LoggingHandler`` already on the process's logging is left in charge
(docs/telemetry.md, *Python log records*): otel-spans installs no handler of its own
and nothing is exported twice. Both handlers count: the SDK's (deprecated) and its
successor in opentelemetry-instrumentation-logging.

The rule (``python_logs.attach``): the SDK handler is in charge when Dask's records
reach it, on the ``distributed`` logger or on an ancestor they propagate to. Dask's own
logging configuration stops ``distributed`` from propagating, so a handler on the root
logger alone does not see Dask's records: then otel-spans exports them, still once.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from opentelemetry.instrumentation.logging.handler import LoggingHandler as ContribHandler
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs import LoggingHandler as SdkHandler
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

from otel_spans.telemetry import python_logs
from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.cluster import await_until, cluster_test, stats, traced_cluster

pytestmark = pytest.mark.usefixtures("default_otel_config")

SCHEDULER_LOGGER = "distributed.scheduler"
#: A check that knows only the SDK's class would export twice with the contrib one.
HANDLERS = pytest.mark.parametrize(
    "handler_class", [SdkHandler, ContribHandler], ids=["sdk", "instrumentation-logging"]
)


def ours_installed() -> bool:
    handlers = logging.getLogger("distributed").handlers
    return any(isinstance(h, python_logs._ProcessHandler) for h in handlers)


@contextmanager
def sdk_handler(
    logger_name: str, *, propagate: bool, handler_class: type[logging.Handler] = SdkHandler
) -> Iterator[InMemoryLogRecordExporter]:
    """An OTel ``LoggingHandler`` on ``logger_name`` (as logging auto-instrumentation
    adds one), with ``distributed``'s propagation set as given; undone afterwards."""
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    with warnings.catch_warnings():
        # the SDK's own handler is deprecated in favour of the contrib one; still used
        warnings.simplefilter("ignore", DeprecationWarning)
        handler = handler_class(logging.WARNING, logger_provider=provider)  # type: ignore[call-arg]
    target = logging.getLogger(logger_name)
    dask_logger = logging.getLogger("distributed")
    was_propagating = dask_logger.propagate
    target.addHandler(handler)
    dask_logger.propagate = propagate
    try:
        yield exporter
    finally:
        dask_logger.propagate = was_propagating
        target.removeHandler(handler)
        provider.shutdown()


def sdk_bodies(exporter: InMemoryLogRecordExporter) -> list[str]:
    return [str(r.log_record.body) for r in exporter.get_finished_logs()]


@pytest.mark.parametrize(
    ("where", "propagate"),
    [
        pytest.param("distributed", False, id="on-distributed"),
        # a logging configuration that lets distributed propagate to the root's handler
        pytest.param("", True, id="on-root-reached"),
    ],
)
@HANDLERS
@cluster_test()
async def test_an_sdk_handler_that_gets_dasks_records_is_left_in_charge(
    otlp_receiver: OtlpReceiver, where: str, propagate: bool, handler_class: type[logging.Handler]
) -> None:
    """A check of the ``distributed`` logger's own handlers only would miss the root's
    (and export twice); a check of the root only would miss the first case."""
    message = f"a warning for the SDK handler ({where or 'root'})"
    config = {"otel-spans.endpoint": otlp_receiver.grpc_endpoint}
    with sdk_handler(where, propagate=propagate, handler_class=handler_class) as exporter:
        async with traced_cluster(config, n_workers=0) as (client, _scheduler, _workers):
            installed = ours_installed()
            logging.getLogger(SCHEDULER_LOGGER).warning(message)
            # a Dask event sent after the record: once it arrived, the record would have
            await client.log_event("marker", {"action": "marker"})
            await await_until(
                lambda: [r for r in otlp_receiver.logs() if r.attributes.get("dask.event.topic")]
            )
            counters = (await stats(client))["python_logs"]
        sdk = sdk_bodies(exporter)
    assert not installed
    assert counters == {"active": False}
    assert sdk.count(message) == 1
    assert not [r for r in otlp_receiver.logs() if r.body == message]


@cluster_test()
async def test_an_sdk_handler_on_the_root_that_dasks_records_never_reach_changes_nothing(
    otlp_receiver: OtlpReceiver,
) -> None:
    """Dask's default: ``distributed`` does not propagate, so the root's SDK handler
    never sees its records. An implementation that stood down for any SDK handler in
    the process would export nothing here."""
    message = "a warning only otel-spans exports"
    config = {"otel-spans.endpoint": otlp_receiver.grpc_endpoint}
    with sdk_handler("", propagate=False) as exporter:
        async with traced_cluster(config, n_workers=0) as (client, _scheduler, _workers):
            installed = ours_installed()
            logging.getLogger(SCHEDULER_LOGGER).warning(message)
            await await_until(lambda: [r for r in otlp_receiver.logs() if r.body == message])
            counters = (await stats(client))["python_logs"]
        sdk = sdk_bodies(exporter)
    assert installed
    assert counters == {"active": True, "errors": 0}
    assert [str(r.body) for r in otlp_receiver.logs()].count(message) == 1
    assert message not in sdk
