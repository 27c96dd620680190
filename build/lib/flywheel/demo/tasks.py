"""Celery tasks of the demo app: one step of the demo loop (see `flywheel.demo.services`).

The task keeps the name it had when the demo lived in the dashboards app, so a message queued
before the move still finds it. Routing leaves it on `default` either way.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings

from flywheel.demo.services import (
    DEMO_TRAINER,
    DemoFailed,
    demo_advance,
    demo_data_ensure,
    demo_people,
    demo_snapshots,
)
from flywheel.training.models import Job, JobState

logger = logging.getLogger(__name__)


@shared_task(name="flywheel.dashboards.tasks.demo_advance", ignore_result=True)
def demo_advance_task() -> None:
    """Launch the demo loop's next job if the one before succeeded; safe to run twice."""
    try:
        people = demo_people()
        # After the first step the data is loaded: finding its snapshots spares re-reading BFCL and
        # WorkBench and re-hashing every snapshot after each job.
        snapshots = demo_snapshots() or demo_data_ensure(external=settings.SHARED_EXTERNAL_DIR, log=logger.info)
        demo_advance(snapshots=snapshots, people=people, log=logger.info)
    except DemoFailed as error:
        logger.warning("the demo loop stopped: %s", error)


def on_job_finished(sender: object, job: Job, **kwargs: Any) -> None:
    """A succeeded job of the demo's trainer moves the loop on; a failure stops it until someone asks again."""
    if job.state == JobState.SUCCEEDED and job.launched_by is not None and job.launched_by.username == DEMO_TRAINER:
        demo_advance_task.delay_on_commit()  # type: ignore[attr-defined]  # celery-types predates it
