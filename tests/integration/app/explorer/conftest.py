"""Debian's Chromium under Playwright, for every explorer test module (test_explorer.py
starts it; its other modules take it from here)."""

from tests.integration.app.explorer.test_explorer import browser  # noqa: F401  (a fixture)
