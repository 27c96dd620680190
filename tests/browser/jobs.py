"""Jobs in the browser: launching one from the form, and waiting on its page (it polls) until a real worker ends it."""

from __future__ import annotations

import json
from typing import Any

from flywheel.training.models import Job, JobState

JOB_SECONDS = 300_000  # milliseconds: a job on two shared cores, model load included


def wait_for_job(page, state: str = JobState.SUCCEEDED) -> Job:
    """Wait on the job page until the job ends; fail with its error unless it ended in `state`."""
    page.wait_for_function(
        "['succeeded', 'failed', 'cancelled'].includes(document.querySelector('[data-state]')?.dataset.state)",
        timeout=JOB_SECONDS,
    )
    job_id = page.url.rstrip("/").split("/")[-1]
    job = Job.objects.get(pk=job_id)
    assert job.state == state, f"{job} ended {job.state}: {job.error}"
    return job


def launch_job(
    page, url: str, *, kind: str, snapshot_id: Any, base_model: str, hyperparameters: dict[str, Any]
) -> None:
    """Fill the launch form (/jobs/new/) as a trainer does and queue the job; the browser lands on its page."""
    page.goto(f"{url}/jobs/new/")
    page.get_by_label("Kind", exact=True).select_option(kind)
    page.get_by_label("Snapshot", exact=True).select_option(str(snapshot_id))
    page.get_by_label("Base model", exact=True).fill(base_model)
    page.get_by_label("Hyperparameters", exact=True).fill(json.dumps(hyperparameters))
    page.get_by_role("button", name="Queue on the gpu queue").click()
    page.wait_for_url("**/jobs/*/")
