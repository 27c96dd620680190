"""Celery tasks of the registry (queue `default`): store a served chat completion as a trajectory, sweep the outbox.

`record_served` is safe to run twice: the exchange's row is gone once stored, and the answer's id
is the trajectory's external id, so a redelivered or retried message adds nothing. A database
error retries with backoff and jitter, a bounded number of times; after that, and for messages
the broker lost, the sweeper (`sweep_served`, run by Celery beat) re-sends what is still kept.
"""

from __future__ import annotations

from celery import shared_task
from django.db import DatabaseError

from flywheel.registry.services import served_store, served_sweep

DATABASE_RETRIES = 5


@shared_task(
    name="flywheel.registry.tasks.record_served",
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(DatabaseError,),
    retry_backoff=2,
    retry_backoff_max=120,
    retry_jitter=True,
    max_retries=DATABASE_RETRIES,
)
def record_served(exchange_id: str) -> str:
    """Store one kept exchange; its status (stored, duplicate, rejected), or `gone` when stored before."""
    return served_store(exchange_id=exchange_id)


@shared_task(name="flywheel.registry.tasks.sweep_served")
def sweep_served() -> int:
    """Re-send kept exchanges with no message behind them, or whose message went unanswered too long."""
    return len(served_sweep())
