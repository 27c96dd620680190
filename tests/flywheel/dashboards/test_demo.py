"""The demo's data and its loop: real data loaded once; the loop's jobs on a real worker (tiny model)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.core.management import call_command
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.dashboards import tasks as demo_tasks
from flywheel.dashboards import views as dashboard_views
from flywheel.dashboards.demo import (
    DEMO_APPROVER,
    DEMO_TRAINER,
    FUNCTION_CALLER,
    DemoPeople,
    Sizes,
    demo_advance,
    demo_data_ensure,
    demo_loop,
    demo_snapshots,
)
from flywheel.datasets.models import RegressionTask, Split
from flywheel.ingest.models import Trajectory
from flywheel.registry.models import GateStatus, ModelVersion
from flywheel.training.models import Job, JobState
from tests.flywheel.training.conftest import TINY_MODEL

EXTERNAL = settings.SHARED_EXTERNAL_DIR
TINY_SIZES = Sizes(
    eval={"sample_size": 4, "batch_size": 4, "max_new_tokens": 16, "device": "cpu"},
    sft={"max_steps": 2, "per_device_train_batch_size": 2, "eval_interval": 0, "checkpoint_interval": 0,
         "device": "cpu"},
    grpo={"max_steps": 2, "num_generations": 2, "max_completion_length": 16, "eval_interval": 0,
          "checkpoint_interval": 0, "device": "cpu"},
    gate={"heldout_sample_size": 4, "batch_size": 4, "max_new_tokens": 16, "device": "cpu"},
)  # fmt: skip


@pytest.mark.django_db
def test_the_demo_data_loads_real_trajectories_and_leak_free_splits_once():
    messages: list[str] = []
    first = demo_data_ensure(external=EXTERNAL, log=messages.append)
    counts = (Trajectory.objects.count(), RegressionTask.objects.count())
    second = demo_data_ensure(external=EXTERNAL, log=messages.append)

    assert Trajectory.objects.filter(agent__name="airline").count() == 200
    caller = RegressionTask.objects.filter(agent__name=FUNCTION_CALLER)
    assert caller.filter(split=Split.TRAIN).count() == 300 and caller.filter(split=Split.HELDOUT).count() == 100
    train_keys = set(caller.filter(split=Split.TRAIN).values_list("leakage_key", flat=True))
    assert not train_keys & set(caller.filter(split=Split.HELDOUT).values_list("leakage_key", flat=True))
    assert (first.train, first.heldout) == (second.train, second.heldout)
    assert (first.train.task_count, first.heldout.task_count) == (300, 100)
    assert (Trajectory.objects.count(), RegressionTask.objects.count()) == counts
    assert any("already ingested" in message for message in messages)


@pytest.mark.slow
@pytest.mark.worker
@pytest.mark.timeout(900)
@pytest.mark.django_db(transaction=True)
def test_the_loop_runs_baseline_sft_grpo_and_a_gate_on_a_worker_and_a_second_run_reuses_them(
    celery_worker_process, make_user, settings, tmp_path
):
    people = DemoPeople(trainer=make_user(Role.TRAINER), approver=make_user(Role.APPROVER))
    settings.REGISTRY_DIR = str(tmp_path / "registry")
    celery_worker_process("gpu", env={"REGISTRY_DIR": settings.REGISTRY_DIR})
    snapshots = demo_data_ensure(external=EXTERNAL, log=lambda message: None)
    log: list[str] = []

    gate = demo_loop(snapshots=snapshots, people=people, log=log.append, base_model=str(TINY_MODEL), sizes=TINY_SIZES)

    jobs = Job.objects.order_by("created_at")
    assert [job.kind for job in jobs] == ["eval", "sft", "grpo", "gate"]
    assert all(job.state == JobState.SUCCEEDED for job in jobs)
    grpo_version = ModelVersion.objects.get(training_job=jobs[2])
    assert grpo_version.parent == ModelVersion.objects.get(training_job=jobs[1])
    assert gate.candidate == grpo_version and gate.status in (GateStatus.PASSED, GateStatus.FAILED)
    assert any(line.startswith(("  pass", "  FAIL")) for line in log)

    again = demo_loop(snapshots=snapshots, people=people, log=log.append, base_model=str(TINY_MODEL), sizes=TINY_SIZES)
    assert again == gate and Job.objects.count() == 4


@pytest.mark.django_db
def test_the_demo_data_command_says_where_the_data_is_missing(settings, tmp_path):
    settings.SHARED_EXTERNAL_DIR = tmp_path / "nothing-here"
    with pytest.raises(Exception, match="no third-party data"):
        call_command("demo_data")


@pytest.mark.django_db
def test_one_advance_launches_the_next_step_only_after_the_one_before_succeeded(make_user):
    people = DemoPeople(trainer=make_user(Role.TRAINER), approver=make_user(Role.APPROVER))
    snapshots = demo_data_ensure(external=EXTERNAL, log=lambda message: None)
    advance = {"snapshots": snapshots, "people": people, "log": lambda message: None, "sizes": TINY_SIZES}

    baseline = demo_advance(**advance).waiting_for
    assert (baseline.kind, baseline.snapshot, baseline.state) == ("eval", snapshots.heldout, JobState.QUEUED)
    assert demo_advance(**advance).waiting_for == baseline and Job.objects.count() == 1

    Job.objects.filter(pk=baseline.pk).update(state=JobState.SUCCEEDED)
    sft = demo_advance(**advance).waiting_for
    assert (sft.kind, sft.snapshot, sft.heldout_snapshot) == ("sft", snapshots.train, snapshots.heldout)
    assert sft.launched_by == people.trainer

    Job.objects.filter(pk=sft.pk).update(state=JobState.FAILED, error="out of memory")
    retry = demo_advance(**advance).waiting_for  # a failed step is tried again when asked again
    assert retry.kind == "sft" and retry != sft and Job.objects.count() == 3


@pytest.mark.django_db
def test_the_home_button_queues_the_loop_for_an_admin_once_the_demo_users_exist(client, make_user, monkeypatch):
    queued = []
    monkeypatch.setattr(dashboard_views.demo_advance_task, "delay", lambda: queued.append("advance"))
    client.force_login(make_user(Role.ADMIN))
    assert "Run the demo loop" in client.get(reverse("dashboards:home")).content.decode()

    missing = client.post(reverse("dashboards:demo_start"), follow=True)
    assert "demo users are missing" in missing.content.decode() and queued == []

    make_user(Role.TRAINER, username=DEMO_TRAINER), make_user(Role.APPROVER, username=DEMO_APPROVER)
    response = client.post(reverse("dashboards:demo_start"))
    assert response.status_code == 302 and response["Location"] == reverse("training:job_list")
    assert queued == ["advance"]


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


def test_a_viewer_sees_no_demo_button(client, make_user, db):
    client.force_login(make_user(Role.VIEWER))
    assert "Run the demo loop" not in client.get(reverse("dashboards:home")).content.decode()
