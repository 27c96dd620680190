"""Celery tasks of the training app; all of them run on the `gpu` queue (see CELERY_TASK_ROUTES).

They acknowledge late, so a job whose worker dies is redelivered instead of lost.
"""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task


@shared_task(name="flywheel.training.tasks.gpu_ping", bind=True, acks_late=True, reject_on_worker_lost=True)
def gpu_ping(self: Task) -> dict[str, Any]:
    """Report which worker and queue answered; `manage.py check_workers` sends it."""
    return {"hostname": self.request.hostname, "queue": (self.request.delivery_info or {}).get("routing_key")}
