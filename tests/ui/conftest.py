"""Browser tests of the observer UI: Playwright (PyPI `playwright`, its driver only) driving
Debian's Chromium at /usr/bin/chromium. No browser is ever downloaded (`playwright install` is
never run): when /usr/bin/chromium is missing the session installs Debian's `chromium` package
with apt-get, and skips LOUDLY, naming the reason, when that is not possible."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path(os.environ.get("TURNGATE_TEST_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parent / "test-artifacts"  # gitignored (test-artifacts/)
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"


def _loud_skip(reason: str) -> None:
    banner = "=" * 78
    sys.stderr.write(f"\n{banner}\nUI TESTS SKIPPED: {reason}\n{banner}\n")
    pytest.skip(f"UI tests skipped: {reason}")


def _install_chromium() -> str | None:
    """apt-get install Debian's chromium; the reason it failed, or None."""
    if shutil.which("apt-get") is None:
        return "no apt-get on this machine to install Debian's chromium"
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "not root: cannot apt-get install chromium (install Debian's `chromium` package)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]
    result = subprocess.run(install, capture_output=True, text=True, env=env, timeout=600, check=False)
    if result.returncode != 0:  # a stale package list: update once, then try again
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, timeout=300, check=False)
        result = subprocess.run(install, capture_output=True, text=True, env=env, timeout=600, check=False)
    if result.returncode != 0 or not CHROMIUM.exists():
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        return f"apt-get install chromium failed (exit {result.returncode}): {' | '.join(tail)}"
    return None


@pytest.fixture(scope="session")
def chromium_path() -> Path:
    if not CHROMIUM.exists():
        reason = _install_chromium()
        if reason:
            _loud_skip(reason)
    return CHROMIUM


@pytest.fixture(scope="session")
async def browser(chromium_path: Path) -> AsyncIterator[Any]:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        _loud_skip("the `playwright` package is not installed (pip install playwright; no browser download)")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(chromium_path),
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def axe_script() -> str:
    """axe-core's axe.min.js as the PyPI package `axe-playwright-python` ships it (offline)."""
    try:
        import axe_playwright_python
    except ImportError:
        _loud_skip("the `axe-playwright-python` package (bundles axe-core) is not installed")
    return (Path(axe_playwright_python.__file__).parent / "axe.min.js").read_text(encoding="utf-8")
