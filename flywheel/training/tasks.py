"""Celery tasks of the training app.

`run_job` runs on the `gpu` queue (routed by name) and acknowledges late, so a job whose worker
dies is redelivered; the guarded claim makes a redelivery of a running or finished job a no-op.
It calls the runner, which claims and records through the services (tasks → runner → services).
A database error (the database restarting, say) retries the task with a growing delay for as long
as it lasts: a failed task would be acknowledged and leave its job queued with no message to run it.
`reap_jobs` runs on `default` (its name is outside the gpu route) from Celery beat.
"""

from __future__ import annotations

from celery import Task, shared_task
from django.db import DatabaseError

from flywheel.training import runner, services


@shared_task(name="flywheel.training.tasks.run_job", bind=True, acks_late=True, reject_on_worker_lost=True,
             autoretry_for=(DatabaseError,), retry_backoff=5, retry_backoff_max=300, max_retries=None)
def run_job(self: Task, job_id: str) -> None:
    runner.job_run(job_id=job_id, worker=self.request.hostname or "worker")


@shared_task(name="flywheel.training.reaper.reap_jobs")
def reap_jobs() -> int:
    return len(services.jobs_reap())
