"""Celery tasks of the dashboards app (queue `default`): beat's recount of the count summaries."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from flywheel.dashboards.services import summaries_recount as recount


@shared_task(
    name="flywheel.dashboards.tasks.summaries_recount",
    autoretry_for=(OperationalError,),
    max_retries=3,
    retry_backoff=True,
    retry_jitter=True,
    # A recount that is late is replaced by the next one: no pile-up behind a slow database.
    expires=60,
)
def summaries_recount() -> int:
    """Recount the home page's, dashboards' and queues' counts; safe to run twice (each replaces the last)."""
    return recount()
