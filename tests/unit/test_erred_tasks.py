"""What an erred task exports: a qualified ``exception.type``, ``error.type``, the
message as status description and Python's stack trace, from what a worker sends.

The worker's message is made by distributed's own ``error_message`` and carried as the
scheduler receives it: through distributed's protocol without deserialising
(``Serialized``), or as it is within one process (``Serialize``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from distributed.core import error_message
from distributed.protocol import dumps, loads

from otel_spans import semconv
from otel_spans.export import wire
from otel_spans.scheduler.erred_tasks import erred_log, exception_record, exception_type
from otel_spans.settings import RecordLimits
from otel_spans.task_records import ExceptionRecord, TaskRecord
from otel_spans.telemetry.traces import group_span, task_spans
from tests.support.records import decoded_span, group_record


def raised(error: BaseException) -> dict[str, Any]:
    try:
        raise error
    except BaseException as caught:
        return dict(error_message(caught))


def over_a_comm(message: dict[str, Any]) -> dict[str, Any]:
    """The message as the scheduler's comm hands it over: never deserialised."""
    received: dict[str, Any] = loads(dumps({"op": "task-erred", **message}), deserialize=False)
    return received


def decode_error() -> json.JSONDecodeError:
    return json.JSONDecodeError("Expecting value", "{", 1)


@pytest.mark.parametrize("carried", [lambda m: m, over_a_comm], ids=["in-process", "comm"])
def test_the_type_is_fully_qualified(carried: Any) -> None:
    message = carried(raised(decode_error()))
    # the repr says only "JSONDecodeError(...)"
    assert message["exception_text"].startswith("JSONDecodeError(")
    assert exception_type(message, 4096) == "json.decoder.JSONDecodeError"


def test_builtins_are_bare_as_python_names_them() -> None:
    assert exception_type(over_a_comm(raised(ValueError("x"))), 4096) == "ValueError"


def test_a_class_pickled_by_value_falls_back_to_the_name_in_the_repr() -> None:
    class LocalError(Exception):  # not importable: cloudpickle pickles it by value
        pass

    message = over_a_comm(raised(LocalError("boom")))
    assert exception_type(message, 4096) == "LocalError"


def test_nothing_pickled_falls_back_to_the_repr() -> None:
    assert exception_type({"exception_text": "KeyError('k')"}, 4096) == "KeyError"
    assert exception_type({"exception": object(), "exception_text": ""}, 4096) == "Exception"


def test_the_record_has_the_message_and_pythons_stack_trace() -> None:
    message = over_a_comm(raised(decode_error()))
    record = exception_record(message, 4096)
    assert record.type == "json.decoder.JSONDecodeError"
    assert record.message == "Expecting value: line 1 column 2 (char 1)"
    assert record.stacktrace.startswith("Traceback (most recent call last):\n")
    assert "in raised" in record.stacktrace
    assert record.stacktrace.endswith(
        "json.decoder.JSONDecodeError: Expecting value: line 1 column 2 (char 1)"
    )
    assert exception_record(message, 4096, messages=False) == ExceptionRecord(
        "json.decoder.JSONDecodeError", "", ""
    )


def test_the_stack_trace_stays_within_the_attribute_length() -> None:
    message = over_a_comm(raised(decode_error()))
    assert len(exception_record(message, 40).stacktrace) == 40


def erred_task(exception: ExceptionRecord) -> TaskRecord:
    return TaskRecord(
        key="parse-1",
        prefix="parse",
        group="parse",
        trace_id=1,
        span_id=2,
        parent_span_id=3,
        state="erred",
        worker="tcp://w:1",
        thread=None,
        nbytes=0,
        typename="",
        attempt=1,
        sampled_because="erred",
        start_ns=10,
        end_ns=20,
        phases=(),
        exception=exception,
    )


def attributes(span: Any) -> dict[str, Any]:
    return {kv.key: kv.value for kv in span.attributes}


@pytest.mark.parametrize("messages", [True, False])
def test_an_erred_task_span_has_error_type_and_its_message_as_description(
    messages: bool,
) -> None:
    record = exception_record(over_a_comm(raised(decode_error())), 4096, messages=messages)
    span = decoded_span(task_spans(erred_task(record), limits=RecordLimits())[0])
    assert attributes(span)[semconv.ERROR_TYPE].string_value == "json.decoder.JSONDecodeError"
    assert span.status.code == wire.STATUS_ERROR
    # the message alone (the type is error.type's), none when messages are not captured
    expected = "Expecting value: line 1 column 2 (char 1)" if messages else ""
    assert span.status.message == expected
    (event,) = span.events
    assert {kv.key: kv.value.string_value for kv in event.attributes}[
        semconv.EXCEPTION_TYPE
    ] == "json.decoder.JSONDecodeError"


def test_a_group_names_the_type_its_tasks_raised_else_the_fallback() -> None:
    def group(erred: int, error_type: str = "") -> Any:
        record = group_record(
            name="parse-abc",
            prefix="parse",
            span_id=4,
            parent_span_id=5,
            tasks=3,
            memory=3 - erred,
            erred=erred,
            error_type=error_type,
        )
        return decoded_span(group_span(record, limits=RecordLimits()))

    erred = group(1, "json.decoder.JSONDecodeError")
    assert attributes(erred)[semconv.ERROR_TYPE].string_value == "json.decoder.JSONDecodeError"
    assert erred.status.message == "1 of 3 tasks erred"
    # several types, or only tasks erred because a dependency did: the fallback
    assert attributes(group(2, "_OTHER"))[semconv.ERROR_TYPE].string_value == "_OTHER"
    assert attributes(group(1))[semconv.ERROR_TYPE].string_value == "_OTHER"
    assert semconv.ERROR_TYPE not in attributes(group(0))


def test_the_erred_task_log_carries_the_stack_trace() -> None:
    record = exception_record(over_a_comm(raised(decode_error())), 4096)
    log = erred_log(erred_task(record), 1, kept=True)
    attrs = dict(log.attributes)
    assert attrs[semconv.EXCEPTION_TYPE] == "json.decoder.JSONDecodeError"
    assert attrs[semconv.EXCEPTION_STACKTRACE] == record.stacktrace
    assert "json.decoder.JSONDecodeError: Expecting value" in str(log.body)
    quiet = erred_log(
        erred_task(exception_record({"exception_text": "E()"}, 10, messages=False)), 1, kept=True
    )
    assert semconv.EXCEPTION_STACKTRACE not in dict(quiet.attributes)
