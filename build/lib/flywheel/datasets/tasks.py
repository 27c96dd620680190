"""Celery tasks of the datasets app (queue `default`): generating and screening a synthetic batch, and the
sweeper (Celery beat) that re-sends a batch whose message may be lost."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from flywheel.datasets.services import synthetic_batch_generate, synthetic_batches_sweep


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


@shared_task(name="flywheel.datasets.tasks.sweep_synthetic_batches")
def sweep_synthetic_batches() -> int:
    """Re-send queued batches whose message may be lost; how many were sent."""
    return len(synthetic_batches_sweep())
