"""Storing a trainer's events: whatever a model wrote is kept, even what PostgreSQL cannot hold as is."""

from __future__ import annotations

import pytest

from flywheel.training.models import Job, JobState, Sample
from flywheel.training.services import job_event_store, job_finish, job_heartbeat
from trainer.contracts import DoneEvent, ErrorEvent, LogEvent, SampleEvent

pytestmark = pytest.mark.django_db


def test_a_sample_with_nul_characters_is_stored_with_them_shown_as_replacement_characters(tiny_snapshot):
    job = Job.objects.create(kind="grpo", snapshot=tiny_snapshot, base_model="x", attempts=1)
    event = SampleEvent(step=2, task_id="t\x001", prompt="say\x00", completion="<tool_call>\x00\x00",
                        reward=-1.0, components={"format\x00": -1.0})  # fmt: skip
    job_event_store(job=job, event=event)
    job_event_store(job=job, event=LogEvent(message="decoded \x00 at step 2"))
    job_event_store(job=job, event=ErrorEvent(kind="runtime", message="bad \x00 byte"))
    sample = Sample.objects.get(job=job)
    assert (sample.task_id, sample.prompt, sample.completion) == ("t\ufffd1", "say\ufffd", "<tool_call>\ufffd\ufffd")
    assert sample.components == {"format\ufffd": -1.0}
    job.refresh_from_db()
    assert job.log_tail.endswith("decoded \ufffd at step 2") and job.error == "runtime: bad \ufffd byte"


def test_a_done_event_and_a_stderr_tail_with_nul_characters_finish_the_job(tiny_snapshot):
    job = Job.objects.create(kind="grpo", snapshot=tiny_snapshot, base_model="x", attempts=1, state=JobState.RUNNING)
    job_event_store(job=job, event=DoneEvent(metrics={"reward/mean": 0.5}, files={"note": "a\x00b"}))
    job = job_finish(job=job, exit_code=0, stderr_tail="warning \x00", cancelled=False)
    assert job.state == JobState.SUCCEEDED
    assert job.result["files"] == {"note": "a\ufffdb"} and "warning \ufffd" in job.log_tail


def test_an_attempt_the_reaper_superseded_stops_and_neither_finishes_nor_overwrites_the_next_attempt(tiny_snapshot):
    stale = Job.objects.create(kind="grpo", snapshot=tiny_snapshot, base_model="x", attempts=1, state=JobState.RUNNING)
    Job.objects.filter(pk=stale.pk).update(attempts=2)  # reaped, requeued and claimed again elsewhere
    assert job_heartbeat(job=stale) is True
    job_event_store(job=stale, event=DoneEvent(metrics={"reward/mean": 0.9}, files={}))
    job_event_store(job=stale, event=ErrorEvent(kind="runtime", message="the stale trainer"))
    job_finish(job=stale, exit_code=0, stderr_tail="", cancelled=True)
    current = Job.objects.get(pk=stale.pk)
    assert (current.state, current.attempts, current.result, current.error) == (JobState.RUNNING, 2, {}, "")
    assert job_heartbeat(job=current) is False


def test_a_requeued_job_stops_its_old_attempt_before_anyone_claims_it(tiny_snapshot):
    stale = Job.objects.create(kind="grpo", snapshot=tiny_snapshot, base_model="x", attempts=1, state=JobState.RUNNING)
    Job.objects.filter(pk=stale.pk).update(state=JobState.QUEUED)
    assert job_heartbeat(job=stale) is True
    assert job_finish(job=stale, exit_code=0, stderr_tail="", cancelled=True).state == JobState.QUEUED
