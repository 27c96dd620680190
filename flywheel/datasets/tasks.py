"""Celery tasks of the datasets app (queue `default`): generating and screening a synthetic batch."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from flywheel.datasets.services import synthetic_batch_generate


@shared_task(
    name="flywheel.datasets.tasks.generate_synthetic_batch",
    autoretry_for=(OperationalError,),
    max_retries=5,
    retry_backoff=True,
    retry_jitter=True,
)
def generate_synthetic_batch(batch_id: str) -> None:
    """Generate and screen a queued batch; a second delivery finds it ready and does nothing."""
    synthetic_batch_generate(batch_id=batch_id)
