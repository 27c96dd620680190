"""Celery tasks of the core app: liveness pings, one answered on each queue (`default` and `gpu`).

`gpu_ping` lives here, not in the training app, so that `manage.py check_workers` reaches both
queues without importing training; settings route it to `gpu` by its name, explicitly.
"""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task


def _answer(task: Task) -> dict[str, Any]:
    return {"hostname": task.request.hostname, "queue": (task.request.delivery_info or {}).get("routing_key")}


@shared_task(name="flywheel.core.tasks.ping", bind=True)
def ping(self: Task) -> dict[str, Any]:
    """Report which worker and queue answered; `manage.py check_workers` sends it."""
    return _answer(self)


@shared_task(name="flywheel.core.tasks.gpu_ping", bind=True, acks_late=True, reject_on_worker_lost=True)
def gpu_ping(self: Task) -> dict[str, Any]:
    """The same report from the `gpu` queue, with the acks of the jobs that run there."""
    return _answer(self)
