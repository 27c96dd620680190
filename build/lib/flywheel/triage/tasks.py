"""Celery tasks of the triage app (queue `default`): suggestions and queue rules, after ingest, feedback
or a policy change."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from flywheel.triage.services import queue_rules_apply, suggestions_compute_for_agent, trajectories_triage

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
    """Suggest buckets for freshly stored trajectories, then apply queue rules (which may read the
    suggestions); a second delivery recomputes the same rows and adds no item twice."""
    trajectories_triage(trajectory_ids=trajectory_ids)


@shared_task(
    name="flywheel.triage.tasks.apply_queue_rules",
    autoretry_for=(OperationalError,),
    max_retries=5,
    retry_backoff=True,
    retry_jitter=True,
)
def apply_queue_rules(trajectory_ids: list[str]) -> None:
    """Apply the queues' rules to trajectories whose signals changed (feedback arrived); safe to run twice."""
    queue_rules_apply(trajectory_ids=trajectory_ids)


@shared_task(
    name="flywheel.triage.tasks.recompute_agent_suggestions",
    autoretry_for=(OperationalError,),
    max_retries=5,
    retry_backoff=True,
    retry_jitter=True,
)
def recompute_agent_suggestions(agent_id: str) -> None:
    """Recompute an agent's suggestions after its safety policy changed; a gone agent has no trajectories.

    Queue rules are not applied: they take in trajectories as they arrive, and this is no arrival.
    """
    suggestions_compute_for_agent(agent_id=agent_id)
