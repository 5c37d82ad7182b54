"""Senders of every signal to one collector share one gRPC channel, closed by the last.

Checked against a real loopback receiver: what reached it, which channel each sender
used, and that nothing is open once every sender has shut down.
"""

from __future__ import annotations

import threading

import pytest

from otel_spans.export import grpc_channels
from otel_spans.export.grpc_sender import GrpcSender
from otel_spans.export.senders import make_otlp_sender
from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.senders import request, target


def _sender(receiver: OtlpReceiver, signal: str, **overrides: object) -> GrpcSender:
    sender = make_otlp_sender(target(receiver, "grpc", signal, **overrides), signal=signal)
    assert isinstance(sender, GrpcSender)
    return sender


def test_logs_metrics_and_traces_share_one_channel_closed_by_the_last(
    receiver: OtlpReceiver,
) -> None:
    before = grpc_channels.open_channels()
    senders = [_sender(receiver, "traces"), _sender(receiver, "logs"), _sender(receiver, "metrics")]
    traces, logs, metrics = senders
    assert grpc_channels.open_channels() == before  # nothing taken before a send
    # A trace request parses as a logs or metrics request too (field 1, then unknown
    # fields): what matters here is which service each reaches.
    assert traces.send(request("t")) and logs.send(b"") and metrics.send(b"")
    assert traces._shared is logs._shared is metrics._shared is not None
    assert grpc_channels.open_channels() == before + 1
    assert receiver.attempts("traces") == receiver.attempts("logs") == 1
    assert receiver.attempts("metrics") == 1
    current = traces._shared.current()
    assert current is not None
    channel, _ = current
    traces.shutdown()
    logs.shutdown()
    assert metrics.send(b"")  # still open for the last user
    closed_call = metrics._call
    metrics.shutdown()
    assert grpc_channels.open_channels() == before
    with pytest.raises(ValueError, match="closed channel"):
        closed_call(b"", timeout=1)
    with pytest.raises(ValueError, match="closed channel"):
        channel.unary_unary("/x/y")(b"", timeout=1)


def test_a_sender_that_never_sent_holds_no_channel(receiver: OtlpReceiver) -> None:
    before = grpc_channels.open_channels()
    sender = _sender(receiver, "logs")
    sender.shutdown()
    assert grpc_channels.open_channels() == before
    assert not sender.send(b"")  # shut down: refused without opening one
    assert grpc_channels.open_channels() == before


def test_what_a_channel_is_made_of_separates_channels(receiver: OtlpReceiver) -> None:
    plain, gzipped = _sender(receiver, "logs"), _sender(receiver, "metrics", compression="gzip")
    try:
        assert plain.send(b"") and gzipped.send(b"")
        assert plain._shared is not gzipped._shared
    finally:
        plain.shutdown()
        gzipped.shutdown()


def test_a_reconnect_gives_every_signal_the_fresh_channel(receiver: OtlpReceiver) -> None:
    """One sender finds the collector unavailable and reconnects the shared channel;
    the other signal's sender then uses the fresh channel (no call on a closed one)."""
    logs, metrics = _sender(receiver, "logs"), _sender(receiver, "metrics")
    try:
        assert metrics.send(b"")
        first = metrics._generation
        receiver.set_mode("unavailable")
        result: list[bool] = []
        thread = threading.Thread(target=lambda: result.append(bool(logs.send(b""))))
        thread.start()
        receiver.wait_for_attempts("logs", 2)
        receiver.set_mode("ok")
        thread.join(10)
        assert result == [True]
        assert metrics.send(b"")
        assert metrics._generation > first
        assert metrics._shared is logs._shared
    finally:
        logs.shutdown()
        metrics.shutdown()


def test_a_call_racing_the_last_shutdown_opens_no_new_channel(receiver: OtlpReceiver) -> None:
    """A pipeline's thread may still be sending while the sender shuts down (a close
    that gave up waiting for it): the released channel is not opened again, where it
    would be left open. Wrong code caught: a channel made after the last release."""
    sender = _sender(receiver, "logs")
    assert sender.send(b"")
    shared = sender._shared
    assert shared is not None
    sender.shutdown()
    sender._shared = shared  # as the racing thread still sees it
    sender._stopping.clear()
    assert not sender.send(b"")
    assert shared.current() is None and shared._channel is None


def test_a_forked_child_shares_nothing_with_its_parent(receiver: OtlpReceiver) -> None:
    """A gRPC channel is not usable across a fork: a child's senders open their own.
    Wrong code caught: a child handed the parent's channel."""
    import os

    sender = _sender(receiver, "logs")
    try:
        assert sender.send(b"")
        assert grpc_channels.open_channels() >= 1
        pid = os.fork()
        if pid == 0:  # the child: only look, then leave at once
            os._exit(0 if grpc_channels.open_channels() == 0 else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert sender.send(b"")  # the parent's channel still works
    finally:
        sender.shutdown()
