"""Template context shared by every page: the navigation."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

# Sections in the order of the flywheel; a section whose page has not landed is shown disabled.
SECTIONS: list[tuple[str, str]] = [
    ("Trajectories", "ingest:trajectory_list"),
    ("Triage", "triage:queue"),
    ("Tasks", "datasets:task_list"),
    ("Rewards", "rewards:run_list"),
    ("Jobs", "training:job_list"),
    ("Models", "registry:version_list"),
    ("Monitoring", "monitoring:index"),
    ("Dashboards", "dashboards:index"),
]


def _url_or_none(name: str) -> str | None:
    try:
        return reverse(name)
    except NoReverseMatch:
        return None


def navigation(request: HttpRequest) -> dict[str, Any]:
    items = []
    for label, url_name in SECTIONS:
        url = _url_or_none(url_name)
        active = url is not None and url != "/" and request.path.startswith(url)
        items.append({"label": label, "url": url, "active": active})
    return {"nav_sections": items}
