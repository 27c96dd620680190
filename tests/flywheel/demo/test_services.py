"""The demo's data and its loop: real data loaded once; the loop's jobs on a real worker (tiny model)."""

from __future__ import annotations

import pytest
from django.conf import settings

from flywheel.core.roles import Role
from flywheel.datasets.models import RegressionTask, Split
from flywheel.demo.services import FUNCTION_CALLER, DemoPeople, Sizes, demo_advance, demo_data_ensure, demo_loop
from flywheel.ingest.models import Trajectory
from flywheel.registry.models import GateStatus, ModelVersion
from flywheel.training.models import Job, JobState
from tests.flywheel.training.conftest import TINY_MODEL

EXTERNAL = settings.SHARED_EXTERNAL_DIR
TINY_SIZES = Sizes(
    eval={"sample_size": 4, "batch_size": 4, "max_new_tokens": 16, "device": "cpu"},
    # The tiny model cannot be right anyway: short limits keep its runs quick, whatever they cut
    # (SFT's own limit is derived: one shorter than every prompt would leave nothing to train on).
    sft={"max_steps": 2, "per_device_train_batch_size": 2, "eval_interval": 0, "checkpoint_interval": 0,
         "eval_max_new_tokens": 16, "max_truncated_share": 1.0, "device": "cpu"},
    grpo={"max_steps": 2, "num_generations": 2, "max_completion_length": 16, "eval_interval": 0,
          "eval_max_new_tokens": 16, "max_truncated_share": 1.0, "checkpoint_interval": 0, "device": "cpu"},
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
