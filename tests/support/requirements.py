"""What a test needs that may be missing from a machine: one rule for all of them.

Outside CI a missing binary or package skips the test with its reason (``-rs`` prints
every reason at the end of the run). In CI (``CI=true``) it fails: CI installs
everything the tests need (``./run test``), so a missing part there is a broken setup,
not a reason to pass without checking.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def unavailable(what: str, why: str) -> NoReturn:
    """Skip (or, in CI, fail) because ``what`` is missing."""
    message = f"{what} is needed and missing: {why}"
    if in_ci():
        pytest.fail(f"{message} (CI installs every test dependency: see ./run test)")
    pytest.skip(message)


def require_module(name: str, why: str = "a test dependency (pyproject [test])") -> ModuleType:
    """Import ``name`` or skip/fail."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        unavailable(f"Python package {name!r}", f"{why}; {exc}")


def require_file(path: Path, why: str) -> Path:
    """``path`` when it exists (an installed binary), else skip/fail."""
    if not path.exists():
        unavailable(str(path), why)
    return path
