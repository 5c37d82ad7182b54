"""Headless Chromium (Debian's ``chromium``) for the tests that look at pages in a browser.

Headless, no sandbox (root), no network features, a throwaway profile. A test that needs
it calls ``require_file(CHROMIUM, ...)`` first (:mod:`tests.support.requirements`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")


def chromium_command(tmp_path: Path, *args: str, window: str = "1200,900") -> list[str]:
    """Headless Chromium, no sandbox (root), no network features, a throwaway profile."""
    return [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--window-size={window}",
        *args,
    ]


def chromium_dump(page: Path, tmp_path: Path) -> tuple[str, str]:
    result = subprocess.run(
        chromium_command(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout, result.stderr
