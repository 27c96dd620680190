"""The demo's task: one advance of the loop, queued again by each succeeded job of the demo's trainer."""

from __future__ import annotations

import pytest
from django.conf import settings

from flywheel.core.roles import Role
from flywheel.demo import tasks as demo_tasks
from flywheel.demo.services import DEMO_APPROVER, DEMO_TRAINER, demo_data_ensure, demo_snapshots
from flywheel.training.models import Job, JobState

EXTERNAL = settings.SHARED_EXTERNAL_DIR


def test_the_task_keeps_the_name_it_was_queued_under_before_the_demo_had_its_own_app():
    assert demo_tasks.demo_advance_task.name == "flywheel.dashboards.tasks.demo_advance"


@pytest.mark.django_db
def test_an_advance_after_the_first_finds_the_snapshots_without_loading_the_data_again(make_user, monkeypatch):
    assert demo_snapshots() is None
    loaded = demo_data_ensure(external=EXTERNAL, log=lambda message: None)
    assert demo_snapshots() == loaded
    make_user(Role.TRAINER, username=DEMO_TRAINER), make_user(Role.APPROVER, username=DEMO_APPROVER)
    advanced = []
    monkeypatch.setattr(demo_tasks, "demo_data_ensure", lambda **kwargs: pytest.fail("the data was loaded again"))
    monkeypatch.setattr(demo_tasks, "demo_advance", lambda *, snapshots, **kwargs: advanced.append(snapshots))
    demo_tasks.demo_advance_task()
    assert advanced == [loaded]


@pytest.mark.django_db
def test_a_succeeded_job_of_the_demo_trainer_moves_the_loop_on_and_others_do_not(make_user, monkeypatch):
    queued = []
    monkeypatch.setattr(demo_tasks.demo_advance_task, "delay_on_commit", lambda: queued.append("advance"))
    snapshots = demo_data_ensure(external=EXTERNAL, log=lambda message: None)
    demo_trainer = make_user(Role.TRAINER, username=DEMO_TRAINER)
    succeeded = Job(kind="eval", snapshot=snapshots.heldout, launched_by=demo_trainer, state=JobState.SUCCEEDED)
    failed = Job(kind="eval", snapshot=snapshots.heldout, launched_by=demo_trainer, state=JobState.FAILED)
    other = Job(kind="eval", snapshot=snapshots.heldout, launched_by=make_user(Role.TRAINER), state=JobState.SUCCEEDED)

    for job in (other, failed):  # a failure stops the loop: it is not retried without a person asking
        demo_tasks.on_job_finished(sender=Job, job=job)
    assert queued == []
    demo_tasks.on_job_finished(sender=Job, job=succeeded)
    assert queued == ["advance"]
