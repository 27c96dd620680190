"""Celery tasks of the dashboards app (queue `default`): the recount of the count summaries, and beat's
paced one."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from flywheel.dashboards.services import summaries_recount as recount
from flywheel.dashboards.services import summaries_recount_paced as recount_paced


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


@shared_task(
    name="flywheel.dashboards.tasks.summaries_recount_paced",
    autoretry_for=(OperationalError,),
    max_retries=3,
    retry_backoff=True,
    retry_jitter=True,
    expires=60,
)
def summaries_recount_paced() -> int:
    """Beat's tick: recount unless the last recount was too recent for its cost (SUMMARY_RECOUNT_SHARE)."""
    return recount_paced()
