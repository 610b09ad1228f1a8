"""A real browser for the web pages: Debian's headless Chromium, driven by Playwright (no browser download).

The ``browser`` fixture (tests/conftest.py) launches it; a module of browser tests sets
``pytestmark = needs_chromium``. Screenshots go to ``screenshots/`` at the top of the checkout (not
tracked; ``FOLDGATE_SCREENSHOTS`` names another folder).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright import async_api as playwright

CHROMIUM = os.environ.get("FOLDGATE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = Path(os.environ.get("FOLDGATE_SCREENSHOTS") or Path(__file__).resolve().parents[2] / "screenshots")
#: What the machine's closed network needs: no background fetches, no sandbox as root.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

#: The skip rule of every browser test. CI sets FOLDGATE_REQUIRE_BROWSER: there a missing Chromium fails these
#: tests instead of skipping them.
needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists() and not os.environ.get("FOLDGATE_REQUIRE_BROWSER"),
    reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)",
)


async def shot(page: playwright.Page, name: str) -> None:
    """Write a screenshot of the whole of ``page`` to ``SHOTS/<name>.png``."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
