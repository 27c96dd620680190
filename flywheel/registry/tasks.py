"""Celery tasks of the registry (queue `default`): store a served chat completion as a trajectory.

Safe to run twice: the record's id is the trajectory's external id, so a redelivered or retried
message finds the stored trajectory and adds nothing. A database error retries with backoff and
jitter, a bounded number of times.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import DatabaseError

from flywheel.core.models import Agent
from flywheel.registry.services import served_store

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
def record_served(agent_id: str, record: dict[str, Any]) -> str:
    """Store one served exchange of the agent; its status (stored, duplicate, rejected), or `gone` without the agent."""
    agent = Agent.objects.filter(pk=agent_id).first()
    if agent is None:
        return "gone"
    return served_store(agent=agent, record=record).status
