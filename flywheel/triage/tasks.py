"""Celery tasks of the triage app (queue `default`): suggestions, computed after ingest or a policy change."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from flywheel.triage.services import suggestions_compute, suggestions_compute_for_agent

# A database restart or failover is worth waiting for (bounded, backing off with jitter); anything
# else is a bug to see in the log.


@shared_task(
    name="flywheel.triage.tasks.compute_suggestions",
    autoretry_for=(OperationalError,),
    max_retries=5,
    retry_backoff=True,
    retry_jitter=True,
)
def compute_suggestions(trajectory_ids: list[str]) -> None:
    """Suggest buckets for freshly stored trajectories; a second delivery recomputes the same rows."""
    suggestions_compute(trajectory_ids=trajectory_ids)


@shared_task(
    name="flywheel.triage.tasks.recompute_agent_suggestions",
    autoretry_for=(OperationalError,),
    max_retries=5,
    retry_backoff=True,
    retry_jitter=True,
)
def recompute_agent_suggestions(agent_id: str) -> None:
    """Recompute an agent's suggestions after its safety policy changed; a gone agent has no trajectories."""
    suggestions_compute_for_agent(agent_id=agent_id)
