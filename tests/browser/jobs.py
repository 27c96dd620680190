"""Waiting in the browser for a job that a real worker runs: its page polls until the state is final."""

from __future__ import annotations

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
