"""The web UI suite's browser fixtures, for the budgets view test."""

from tests.ui.conftest import axe_script, browser, chromium_path  # noqa: F401
