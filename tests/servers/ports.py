"""Port allocation and deadline-based polling helpers.

Why this module exists: tests that talk to real servers must never wait with
bare ``time.sleep`` calls -- those are either too short (flaky on a loaded CI
machine) or too long (slow everywhere).  Every wait in the test-suite goes
through :func:`wait_until`, which polls a predicate with a hard deadline and
fails with a descriptive ``AssertionError`` so a timeout reads like a failed
assertion, not like a hang.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["free_port", "port_open", "wait_for_port", "wait_until"]

T = TypeVar("T")

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on *host* that was free a moment ago.

    The kernel picks the port (bind to 0), so there is no guessing and no
    collision with a fixed port another test or process uses.  There is an
    unavoidable window between closing our probe socket and the real server
    binding it; servers that can bind port 0 themselves (grpc,
    ``http.server``) should do that instead and only external binaries
    (rotel, prometheus) should rely on this helper.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float = 10.0,
    interval: float = 0.05,
    message: str | Callable[[], str] = "condition was not met",
) -> T:
    """Poll *predicate* until it returns a truthy value or *timeout* expires.

    Returns the truthy value, so callers can write
    ``spans = wait_until(lambda: receiver.spans() or None)``.

    On timeout an ``AssertionError`` is raised carrying *message* (a callable
    is evaluated lazily, which lets callers attach expensive diagnostics such
    as a collector's log only when something actually failed).  Exceptions
    raised by the predicate propagate immediately: they are bugs, not "not
    yet".  This is the only place in the test infrastructure allowed to call
    ``time.sleep``.
    """
    if timeout < 0:
        raise ValueError("timeout must be >= 0")
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            text = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout:.1f}s: {text}")
        time.sleep(min(interval, remaining))


def port_open(host: str, port: int) -> bool:
    """Return True if a TCP connection to *host*:*port* succeeds right now."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_for_port(host: str, port: int, timeout: float = 10.0) -> None:
    """Block until *host*:*port* accepts TCP connections, or fail.

    A listening socket is the earliest reliable signal that an external
    server process is up; it says nothing about application readiness,
    which callers check separately when it matters (e.g. Prometheus'
    ``/-/ready``).
    """
    wait_until(
        lambda: port_open(host, port),
        timeout=timeout,
        message=f"nothing is listening on {host}:{port}",
    )
