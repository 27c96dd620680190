"""Celery tasks of the dashboards app (queue `default`): beat's paced recount of the count summaries."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from flywheel.dashboards.services import summaries_recount_paced as recount_paced


@shared_task(
    name="flywheel.dashboards.tasks.summaries_recount_paced",
    autoretry_for=(OperationalError,),
    max_retries=3,
    retry_backoff=True,
    retry_jitter=True,
    # A recount that is late is replaced by the next one: no pile-up behind a slow database.
    expires=60,
)
def summaries_recount_paced() -> int:
    """Beat's tick: recount every summary unless the last recount was too recent for its cost
    (SUMMARY_RECOUNT_SHARE); safe to run twice (each recount replaces the last)."""
    return recount_paced()
