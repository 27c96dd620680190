"""Copy plotly.js and htmx out of their Python packages into static/vendor/ (no CDN anywhere)."""

from __future__ import annotations

import shutil
from importlib.resources import files
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

# (package, path inside it, name under static/vendor/)
ASSETS = [
    ("plotly", "package_data/plotly.min.js", "plotly.min.js"),
    ("js_lib_htmx", "static/htmx/htmx.min.js", "htmx.min.js"),
]


def vendor_dir() -> Path:
    return Path(settings.BASE_DIR) / "static" / "vendor"


class Command(BaseCommand):
    help = "Copy the vendored JavaScript (plotly.js, htmx) from their Python packages into static/vendor/."

    def handle(self, *args: Any, **options: Any) -> None:
        target = vendor_dir()
        target.mkdir(parents=True, exist_ok=True)
        for package, inner_path, name in ASSETS:
            source = files(package).joinpath(inner_path)
            with source.open("rb") as src, (target / name).open("wb") as dst:
                shutil.copyfileobj(src, dst)
            self.stdout.write(f"static/vendor/{name} <- {package}/{inner_path}")
