"""Screenshots for a person to look at: with FLYWHEEL_SCREENSHOTS set to a folder, browser tests save what they saw."""

from __future__ import annotations

import os
from pathlib import Path

FOLDER = os.environ.get("FLYWHEEL_SCREENSHOTS")


def shot(page, name: str, *, full_page: bool = True) -> None:
    if FOLDER:
        page.screenshot(path=str(Path(FOLDER) / f"{name}.png"), full_page=full_page)
