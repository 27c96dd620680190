"""Writes of the dashboards app: the recounts behind the pages' counts (`CountSummary`), which beat runs."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from flywheel.core.services import summaries_store
from flywheel.dashboards.selectors import DASHBOARD_KIND, dashboard_counts_by_agent
from flywheel.monitoring.services import monitor_summaries_recount
from flywheel.triage.services import queue_summaries_recount


def dashboard_summaries_recount() -> None:
    """Recount the home page's and dashboards' counts of every agent, in one transaction."""
    with transaction.atomic():
        counted_at = timezone.now()
        summaries_store(kind=DASHBOARD_KIND, counts=dashboard_counts_by_agent(), counted_at=counted_at)


def summaries_recount() -> int:
    """Every summary: the dashboards', each queue's and each agent's monitor. Returns how many were recounted."""
    dashboard_summaries_recount()
    return 1 + queue_summaries_recount() + monitor_summaries_recount()
