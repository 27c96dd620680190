"""Celery tasks of the ingest app (queue `default`): process one upload, and sweep the ones whose message may be lost.

`process_upload` acknowledges late: a worker killed mid-file leaves its message to be redelivered,
and the upload to the sweeper (`sweep_uploads`, run by Celery beat), which re-sends it once its
progress went stale. Either way the next claim continues after the last committed batch. A
database error before the claim retries the task a bounded number of times, with backoff and
jitter; after that the sweeper is the safety net.
"""

from __future__ import annotations

from celery import shared_task
from django.db import DatabaseError

from flywheel.ingest.services import upload_process, uploads_sweep

DATABASE_RETRIES = 5


@shared_task(
    name="flywheel.ingest.tasks.process_upload",
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(DatabaseError,),
    retry_backoff=5,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=DATABASE_RETRIES,
)
def process_upload(upload_id: str) -> None:
    """Ingest one upload from where it was left; a delivery that finds it claimed and alive does nothing."""
    upload_process(upload_id=upload_id)


@shared_task(name="flywheel.ingest.tasks.sweep_uploads")
def sweep_uploads() -> int:
    """Re-send queued uploads with no message behind them and running ones whose worker went silent."""
    return len(uploads_sweep())
