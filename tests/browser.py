"""Load a page in headless Chromium: the DOM after its scripts ran, and every console line it logged."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def chromium() -> str:
    """The browser's path; skips the test when none is installed (CI installs chromium with apt in .ci/run)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("chromium is not installed (CI installs it with apt in .ci/run)")
    return browser


def load_in_browser(page: Path, profile: Path) -> tuple[str, list[str]]:
    """The DOM of `page` after its scripts ran (15 s of virtual time), and the console lines chromium logged
    (`console.log`, `console.error`, uncaught errors: Chromium logs them all as `CONSOLE` lines on stderr)."""
    command = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", f"--user-data-dir={profile / 'chromium'}",
        "--enable-logging=stderr", "--v=0", "--virtual-time-budget=15000", "--dump-dom", page.resolve().as_uri(),
    ]  # fmt: skip
    finished = subprocess.run(command, capture_output=True, text=True, timeout=180)
    console = [line for line in finished.stderr.splitlines() if "CONSOLE" in line]
    return finished.stdout, console
