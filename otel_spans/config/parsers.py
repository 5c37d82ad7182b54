"""Value parsers: one small class per kind of value, with its bounds as fields.

A parser turns an ``otel-spans`` dask.config value into a typed value or raises
:class:`ConfigError` naming the key, the value and what is allowed (``allowed`` is also
the text of the docs table). ``from_env`` reads the same setting from an ``OTEL_*``
variable's text, as the OTel specification says (enums case-insensitive, durations in
milliseconds, booleans true only for ``true``); it may return None, which means "as if
the variable were not set".
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any

from dask.utils import parse_bytes, parse_timedelta

from otel_spans.redact import redact_url
from otel_spans.settings import ConfigError

NAMESPACE = "otel-spans"
logger = logging.getLogger("otel_spans.config")


#: (variable, keyed digest of value and reason) pairs already warned about: each is
#: said once per process, however many schedulers, workers and clients resolve the
#: settings. A digest, not the value: a headers variable's value is a secret.
_WARNED: set[tuple[str, str]] = set()
_WARNED_LOCK = threading.Lock()
#: Key of those digests, new in every process.
_DIGEST_KEY = os.urandom(16)
#: Calls of :func:`warn_ignored` so far, said or not: a resolution that made one is not
#: reused (``otel_spans.config.Settings.from_config``), so that it warns again when
#: ``_WARNED`` forgets (tests) exactly as it did before.
_warn_calls = 0


def warn_calls() -> int:
    """How many times :func:`warn_ignored` was called in this process."""
    return _warn_calls


def warn_ignored(name: str, value: str, why: str) -> None:
    """Log once that an ``OTEL_*`` variable's value is ignored, and why.

    ``why`` is logged as given: a caller whose value may be secret leaves it out."""
    global _warn_calls
    digest = hashlib.blake2b(f"{value}\0{why}".encode(), key=_DIGEST_KEY).hexdigest()
    with _WARNED_LOCK:
        _warn_calls += 1
        if (name, digest) in _WARNED:
            return
        _WARNED.add((name, digest))
    logger.warning("otel-spans: ignoring %s: %s", name, why)


class Shown(str):
    """A value as an error may show it (secrets replaced), printed without quotes."""

    def __repr__(self) -> str:
        return str(self)


def fail(key: str, value: Any, allowed: str) -> ConfigError:
    """The error for a bad value of ``key`` (a dotted ``otel-spans`` key or a variable)."""
    name = key if key.startswith("OTEL_") else f"{NAMESPACE}.{key}"
    return ConfigError(f"{name}: invalid value {value!r}; expected {allowed}")


def env_boolean(name: str, text: str) -> bool:
    """An ``OTEL_*`` boolean, per the specification: only ``true`` (any case) is true;
    anything but ``false`` or empty is also warned about."""
    value = text.strip().lower()
    if value not in ("true", "false", ""):
        warn_ignored(name, text, f"invalid value {text!r}; expected true or false; read as false")
    return value == "true"


@dataclass(frozen=True)
class Parser:
    """Base parser: ``__call__`` for dask.config values, ``from_env`` for variables."""

    #: What is allowed, as said in errors and in the docs table.
    allowed: str = "any value"

    def __call__(self, key: str, value: Any) -> Any:
        return value

    def from_env(self, name: str, text: str) -> Any:
        return self(name, text)


@dataclass(frozen=True)
class Boolean(Parser):
    allowed: str = "true or false"

    def __call__(self, key: str, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise fail(key, value, self.allowed)

    def from_env(self, name: str, text: str) -> bool:
        return env_boolean(name, text)


@dataclass(frozen=True)
class FollowCaller(Parser):
    """``traces.follow-caller-sampling``, kept from 0.2: the ``traces.sampler`` it
    stands for (false is ``always_on``, true ``parentbased_always_on``)."""

    allowed: str = "true or false"

    def __call__(self, key: str, value: Any) -> str:
        follows = Boolean()(key, value)
        return "parentbased_always_on" if follows else "always_on"


@dataclass(frozen=True)
class Integer(Parser):
    minimum: int = 0
    maximum: int | None = None
    allowed: str = ""

    def __post_init__(self) -> None:
        if not self.allowed:
            text = f"an integer >= {self.minimum}"
            if self.maximum is not None:
                text = f"an integer from {self.minimum} to {self.maximum}"
            object.__setattr__(self, "allowed", text)

    def __call__(self, key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise fail(key, value, self.allowed)
        try:
            number = int(value)
        except ValueError:
            raise fail(key, value, self.allowed) from None
        if number < self.minimum or (self.maximum is not None and number > self.maximum):
            raise fail(key, value, self.allowed)
        return number


@dataclass(frozen=True)
class Port(Integer):
    """A TCP port; 0 picks a free one."""

    allowed: str = "a port number from 0 to 65535"

    def __call__(self, key: str, value: Any) -> int:
        number = Integer(minimum=0)(key, value)
        if number > 65535:
            raise fail(key, value, self.allowed)
        return number


@dataclass(frozen=True)
class Number(Parser):
    """A float within bounds (a ratio, a price)."""

    minimum: float = 0.0
    maximum: float = math.inf
    allowed: str = "a number >= 0"

    def __call__(self, key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise fail(key, value, self.allowed)
        try:
            number = float(value)
        except ValueError:
            raise fail(key, value, self.allowed) from None
        if not self.minimum <= number <= self.maximum:  # NaN fails too
            raise fail(key, value, self.allowed)
        return number


@dataclass(frozen=True)
class ByteSize(Parser):
    """A size in bytes: a number of bytes or a string such as ``16MiB`` (Dask's
    ``parse_bytes``), at least ``minimum``."""

    minimum: int = 1024
    allowed: str = "a size such as 256MiB or a number of bytes, at least 1KiB"

    def __call__(self, key: str, value: Any) -> int:
        try:
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise TypeError
            size = int(parse_bytes(value))
        except (TypeError, ValueError):
            raise fail(key, value, self.allowed) from None
        if size < self.minimum:
            raise fail(key, value, self.allowed)
        return size


@dataclass(frozen=True)
class Duration(Parser):
    """Seconds, from a duration (``5s``, ``500ms``, a number of seconds); an ``OTEL_*``
    duration is milliseconds, as the OTel specification says."""

    positive: bool = False
    #: Longest allowed (seconds): a bound where a mistyped unit ("5000" meant as
    #: milliseconds) would otherwise hold records back for an hour.
    maximum: float = math.inf
    allowed: str = "a duration such as 5s, 500ms or a number of seconds"

    def __call__(self, key: str, value: Any) -> float:
        try:
            if isinstance(value, bool):
                raise TypeError
            seconds = float(parse_timedelta(value, default="seconds"))
        except (TypeError, ValueError, KeyError, AttributeError):
            raise fail(key, value, self.allowed) from None
        if seconds < 0 or (self.positive and seconds == 0):
            raise fail(key, value, "a positive duration" if self.positive else ">= 0")
        if seconds > self.maximum:
            raise fail(key, value, self.allowed)
        return seconds

    def from_env(self, name: str, text: str) -> float:
        allowed = "a positive number of milliseconds"
        if self.maximum < math.inf:
            allowed += f" up to {self.maximum * 1000:g}"
        try:
            millis = float(text)
        except ValueError:
            raise fail(name, text, allowed) from None
        if not 0 < millis <= self.maximum * 1000:  # NaN fails too
            raise fail(name, text, allowed)
        return millis / 1000


@dataclass(frozen=True)
class Timeout(Duration):
    """Seconds one export may take; 0 is no limit (``math.inf``), as the OTel
    specification says of every timeout variable (milliseconds there)."""

    allowed: str = "a duration such as 5s, 500ms or a number of seconds; 0: no limit"

    def __call__(self, key: str, value: Any) -> float:
        seconds = Duration(allowed=self.allowed)(key, value)
        return math.inf if seconds == 0 else seconds

    def from_env(self, name: str, text: str) -> float:
        allowed = "a number of milliseconds >= 0 (0: no limit)"
        try:
            millis = float(text)
        except ValueError:
            raise fail(name, text, allowed) from None
        if not millis >= 0 or math.isinf(millis):
            raise fail(name, text, allowed)
        return math.inf if millis == 0 else millis / 1000


@dataclass(frozen=True)
class Choice(Parser):
    """One of ``choices``; from a variable, case-insensitive."""

    choices: tuple[str, ...] = ()
    allowed: str = ""

    def __post_init__(self) -> None:
        if not self.allowed:
            text = ", ".join(self.choices[:-1]) + f" or {self.choices[-1]}"
            object.__setattr__(self, "allowed", text)

    def __call__(self, key: str, value: Any) -> Any:
        if value not in self.choices:
            raise fail(key, value, self.allowed)
        return value

    def from_env(self, name: str, text: str) -> Any:
        return self(name, text.strip().lower())


@dataclass(frozen=True)
class OtlpProtocol(Choice):
    """``http/json`` is a valid OTLP protocol that otel-spans does not speak: said as
    such (then ignored like any bad value)."""

    def from_env(self, name: str, text: str) -> Any:
        if text.strip().lower() == "http/json":
            raise ConfigError(f"{name}: http/json is not supported (grpc or http/protobuf)")
        return super().from_env(name, text)


@dataclass(frozen=True)
class Exporters(Choice):
    """``<signal>.exporter``: one name; ``OTEL_<SIGNAL>_EXPORTER``: a comma-separated,
    case-insensitive list of ``env_choices``. Both give the tuple of names to serve."""

    env_choices: tuple[str, ...] = ()

    def __call__(self, key: str, value: Any) -> tuple[str, ...]:
        return (super().__call__(key, value),)

    def from_env(self, name: str, text: str) -> tuple[str, ...] | None:
        names = [item.strip().lower() for item in text.split(",") if item.strip()]
        unknown = [n for n in names if n not in self.env_choices]
        if unknown:
            warn_ignored(
                name,
                text,
                f"unsupported exporter {', '.join(map(repr, unknown))} (otel-spans supports "
                f"{', '.join(self.env_choices)}); the others are used",
            )
        known = tuple(n for n in names if n in self.env_choices)
        return known or None  # none left: as if unset


@dataclass(frozen=True)
class Text(Parser):
    allowed: str = "a non-empty string or null"

    def __call__(self, key: str, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise fail(key, value, self.allowed)
        return value


@dataclass(frozen=True)
class Currency(Text):
    allowed: str = "a short alphanumeric code such as USD"

    def __call__(self, key: str, value: Any) -> str:
        text = Text()(key, value)
        if not text.isalnum() or len(text) > 16:
            raise fail(key, text, self.allowed)
        return text


@dataclass(frozen=True)
class ReadableFile(Text):
    allowed: str = "the path of a readable file"

    def __call__(self, key: str, value: Any) -> str:
        path = Text()(key, value)
        if not os.path.isfile(path):
            raise fail(key, path, self.allowed)
        return path


@dataclass(frozen=True)
class Url(Parser):
    """An endpoint; errors show it with its ``user:password@`` redacted.

    ``host:port`` without a scheme is accepted too (the OTel specification allows it
    for OTLP/gRPC, where ``insecure`` then decides between TLS and plain text); the
    resolver refuses it for OTLP/HTTP, which needs a scheme
    (:func:`otel_spans.config.resolve.Resolver.endpoint`)."""

    allowed: str = (
        "an http:// or https:// URL with a host, e.g. http://collector:4317 (gRPC also host:port)"
    )

    def __call__(self, key: str, value: Any) -> str:
        if not isinstance(value, str):
            raise fail(key, Shown(redact_url(repr(value))), self.allowed)
        text = value.strip()
        shown = redact_url(text)
        bare = not has_scheme(text)
        try:
            parsed = urllib.parse.urlparse("//" + text if bare else text)
            parsed.port  # noqa: B018 (raises ValueError on a bad port)
        except ValueError:
            raise fail(key, shown, self.allowed) from None
        scheme_ok = bare or parsed.scheme in ("http", "https")
        if not scheme_ok or not parsed.hostname or (bare and parsed.path not in ("", "/")):
            raise fail(key, shown, self.allowed)
        return text


def has_scheme(url: str) -> bool:
    """Whether an endpoint names its scheme (``http://c:4317``, not ``c:4317``)."""
    return "://" in url
