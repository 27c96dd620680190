"""Celery tasks of the monitoring app (queue `default`): online scoring, regression checks, the beat's sweep.

Each is safe to run twice: a verdict is stored once (unique per trajectory, scorer and rule), and a
check refreshes the open alert it finds instead of opening another. A database that is restarting
is waited for, a bounded number of times, with backoff and jitter; a message lost for good is made
up for by `monitor_sweep` (Celery beat, MONITOR_EVERY_SECONDS).
"""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from flywheel.core.models import Agent
from flywheel.monitoring.services import monitor_check, scores_compute
from flywheel.monitoring.services import monitor_sweep as sweep


@shared_task(
    name="flywheel.monitoring.tasks.score_trajectories",
    autoretry_for=(OperationalError,),
    max_retries=5,
    retry_backoff=True,
    retry_jitter=True,
)
def score_trajectories(trajectory_ids: list[str]) -> int:
    """Score freshly stored trajectories under their agents' rules; the verdicts computed."""
    return scores_compute(trajectory_ids=trajectory_ids)


@shared_task(
    name="flywheel.monitoring.tasks.check_agent",
    autoretry_for=(OperationalError,),
    max_retries=5,
    retry_backoff=True,
    retry_jitter=True,
)
def check_agent(agent_id: str) -> int:
    """Compare the agent's live version with its predecessor; the alerts open for it (0 when the agent is gone)."""
    agent = Agent.objects.filter(pk=agent_id).first()
    return len(monitor_check(agent=agent)) if agent is not None else 0


@shared_task(name="flywheel.monitoring.tasks.monitor_sweep")
def monitor_sweep() -> int:
    """Score what ingest's messages missed, then check every agent with a live version."""
    return sweep()
