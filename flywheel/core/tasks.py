"""Celery tasks of the core app: a liveness ping for workers on the `default` queue."""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task


@shared_task(name="flywheel.core.tasks.ping", bind=True)
def ping(self: Task) -> dict[str, Any]:
    """Report which worker and queue answered; `manage.py check_workers` sends it."""
    return {"hostname": self.request.hostname, "queue": (self.request.delivery_info or {}).get("routing_key")}
