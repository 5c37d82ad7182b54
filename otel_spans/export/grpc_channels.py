"""One gRPC channel per collector per process, shared by the senders of every signal.

A fresh channel and its first call cost milliseconds of process CPU (gRPC's core starts
its timer and event-engine threads with it; docs/performance.md, "Cluster start and
close"), and a cluster's close sends logs and metrics, often to the same collector: with
one channel per sender that is two connections where one does. Senders of one target
(address, TLS files, compression: what a channel is made of; headers and timeouts are
per call) share a :class:`SharedChannel`, opened by the first call of any of them and
closed once, when the last one shuts down: nothing is left open after the close.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc

_lock = threading.Lock()
_shared: dict[Hashable, SharedChannel] = {}


def _forget_after_fork() -> None:
    """A forked child starts with no shared channel: the parent's are the parent's (a
    gRPC channel is not usable across a fork), and the lock may have been held by a
    thread the child does not have."""
    global _lock
    _lock = threading.Lock()
    _shared.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


class SharedChannel:
    """A channel and the number of senders using it; ``generation`` counts reconnects,
    so that a sender knows when to remake its call object."""

    def __init__(self, key: Hashable, connect: Callable[[], grpc.Channel]):
        self.key = key
        self._connect = connect
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._closed = False
        self.generation = 0
        self.users = 0

    def current(self) -> tuple[grpc.Channel, int] | None:
        """The open channel (opened now if needed) and its generation; None once its
        last user released it (a call racing that shutdown opens nothing new)."""
        with self._lock:
            if self._closed:
                return None
            if self._channel is None:
                self._channel = self._connect()
                self.generation += 1
            return self._channel, self.generation

    def reconnect(self, seen: int) -> None:
        """A fresh channel in place of generation ``seen`` (the collector was
        unavailable); nothing when another sender has already replaced it."""
        with self._lock:
            if self._channel is None or seen != self.generation:
                return
            old, self._channel = self._channel, self._connect()
            self.generation += 1
        old.close()

    def _close(self) -> None:
        with self._lock:
            self._closed = True
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()


def acquire(key: Hashable, connect: Callable[[], grpc.Channel]) -> SharedChannel:
    """The shared channel of ``key``, counted as used once more (``connect`` makes its
    channel when none is open yet)."""
    with _lock:
        shared = _shared.get(key)
        if shared is None:
            shared = _shared[key] = SharedChannel(key, connect)
        shared.users += 1
        return shared


def release(shared: SharedChannel) -> None:
    """One user fewer; the last one closes the channel."""
    with _lock:
        shared.users -= 1
        if shared.users > 0:
            return
        if _shared.get(shared.key) is shared:
            del _shared[shared.key]
    shared._close()


def open_channels() -> int:
    """How many shared channels are in use now (for tests and the close check)."""
    with _lock:
        return len(_shared)
