"""Secrets kept out of sight: URL credentials redacted, header lists parsed without echo.

Header values (tokens), the password of an endpoint's ``user:password@`` and the
contents of key files must never appear in a log record, an exception message, a
``repr``, an attribute or a page. Two helpers do it, used everywhere:

* :func:`redact_url` is the one way a URL is shown (``ExportTarget.describe``, the
  start line, sender warnings, configuration errors).
* :func:`parse_headers` reads an ``OTEL_EXPORTER_OTLP_*HEADERS`` value as the OTLP
  exporter specification says (``name=value`` pairs, comma-separated, values
  URL-decoded) before any OpenTelemetry code sees it. The SDK's own parser logs a
  malformed entry whole, value included; this one names the header (or its position,
  when even the name is unreadable), never the value, and drops it.

This module imports nothing but the standard library, so that ``settings.py`` can use
it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from urllib.parse import unquote

#: Stands for a hidden value wherever one would be shown.
HIDDEN = "***"

# ``scheme://userinfo@``: up to the authority's last "@" (as ``urlparse`` reads it, so
# that a raw "@" in a password is hidden too); no "/", "?", "#" or whitespace.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s]*)@")
# A header name: an HTTP token (RFC 9110 tchar), as the OTel specification's key format.
_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# An encoded value: what the SDK's liberal parser accepts (baggage octets, "/" and the
# space, for values such as ``Bearer abc/d==``); a quote, backslash, "," or ";" must be
# percent-encoded.
_ENCODED_VALUE = re.compile(r"[\x20\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*")
# A decoded value that HTTP and gRPC metadata both carry: printable ASCII.
_DECODED_VALUE = re.compile(r"[\x20-\x7e]*")

#: Why an entry of a headers variable was dropped: (variable, header name or "#n", why).
Warn = Callable[[str, str, str], None]


def redact_url(text: str) -> str:
    """``text`` with the credentials of every ``scheme://user:password@`` in it hidden.

    ``user:password@`` becomes ``user:***@``; a userinfo without a password (often a
    token alone) becomes ``***@``. Works on any text, well-formed URL or not, so that a
    rejected value can still be shown.
    """

    def hide(match: re.Match[str]) -> str:
        user, colon, _ = match["userinfo"].partition(":")
        shown = f"{user}:{HIDDEN}" if colon else HIDDEN
        return f"{match['scheme']}{shown}@"

    return _USERINFO.sub(hide, text)


def strip_userinfo(url: str) -> str:
    """``url`` without its ``user:password@`` (gRPC has no place for it)."""
    return _USERINFO.sub(lambda m: m["scheme"], url, count=1)


def has_userinfo(url: str) -> bool:
    return _USERINFO.search(url) is not None


def header_problem(name: str, value: str) -> str | None:
    """Why ``name: value`` cannot be sent as a header (naming no value), or None."""
    if not _NAME.fullmatch(name):
        return "the name is not a valid header name"
    if not _DECODED_VALUE.fullmatch(value):
        return "the value has characters other than printable ASCII"
    return None


def parse_headers(variable: str, text: str, warn: Warn) -> dict[str, str]:
    """The headers of an ``OTEL_EXPORTER_OTLP_*HEADERS`` value; a malformed entry is
    passed to ``warn`` (variable, header name or ``#position``, why) and dropped.

    Names are lower-cased (gRPC metadata keys must be), values URL-decoded and
    stripped, as the OTLP exporter specification says.
    """
    headers: dict[str, str] = {}
    for position, entry in enumerate(text.split(","), start=1):
        if not entry.strip():
            continue
        raw_name, equals, raw_value = entry.partition("=")
        name = raw_name.strip()
        if not equals or not _NAME.fullmatch(name):
            why = "is not name=value" if not equals else "has no valid header name"
            warn(variable, f"#{position}", f"entry {why}")
            continue
        where = name.lower()
        if not _ENCODED_VALUE.fullmatch(raw_value):
            warn(variable, where, 'the value must be URL-encoded (%22 for ", %3B for ;)')
            continue
        try:
            value = unquote(raw_value.strip(" \t"), errors="strict")
        except UnicodeDecodeError:
            warn(variable, where, "the value is not URL-encoded UTF-8")
            continue
        problem = header_problem(where, value)
        if problem is not None:
            warn(variable, where, problem)
            continue
        headers[where] = value
    return headers


def shown_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` as they may be shown: names only."""
    return {name: HIDDEN for name in headers}
