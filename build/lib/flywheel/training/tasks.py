"""Celery tasks of the training app.

`run_job` runs on the `gpu` queue (routed by name) and acknowledges late, so a job whose worker
dies is redelivered; the guarded claim makes a redelivery of a running or finished job a no-op.
It calls the runner, which claims and records through the services (tasks → runner → services).
A database error (the database restarting, say) retries the task a bounded number of times with a
growing, jittered delay; once they are spent the job stays queued and the outbox sweeper re-sends it.
`reap_jobs` runs on `default` (its name is outside the gpu route) from Celery beat: it requeues
jobs whose worker went silent and re-sends queued jobs whose message may be lost.
"""

from __future__ import annotations

from celery import Task, shared_task
from django.db import DatabaseError

from flywheel.training import runner, services

DATABASE_RETRIES = 8  # 5 s doubling to 300 s: about a quarter of an hour of retries


@shared_task(name="flywheel.training.tasks.run_job", bind=True, acks_late=True, reject_on_worker_lost=True,
             autoretry_for=(DatabaseError,), retry_backoff=5, retry_backoff_max=300, retry_jitter=True,
             max_retries=DATABASE_RETRIES)  # fmt: skip
def run_job(self: Task, job_id: str) -> None:
    runner.job_run(job_id=job_id, worker=self.request.hostname or "worker")


@shared_task(name="flywheel.training.reaper.reap_jobs")
def reap_jobs() -> int:
    return len(services.jobs_reap()) + len(services.jobs_redispatch())
