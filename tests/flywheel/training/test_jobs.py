"""Jobs on a real Celery worker (Redis in CI), with the tiny model and a scripted trainer stand-in."""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import OperationalError
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.core.services import api_token_create
from flywheel.datasets.importers import read
from flywheel.datasets.services import snapshot_create, tasks_import
from flywheel.training import runner, services
from flywheel.training.models import EvalRun, Job, MetricPoint, Sample
from flywheel.training.tasks import run_job
from tests.flywheel.training.conftest import TINY_MODEL, TINY_TASKS, alive, pids_of, scripted_env, wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def launch(client, token: str, snapshot, **fields) -> Job:
    body = {"kind": "eval", "snapshot": snapshot.content_hash, "base_model": str(TINY_MODEL), **fields}
    response = client.post(
        reverse("training:api_jobs"), body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert response.status_code == 201, response.content
    return Job.objects.get(pk=response.json()["id"])


@pytest.fixture
def trainer_token(make_user) -> str:
    return api_token_create(user=make_user(Role.TRAINER), name="ci")[1]


@pytest.mark.slow
def test_an_eval_job_launched_through_the_api_runs_on_a_real_worker(
    client, make_user, trainer_token, tiny_snapshot, celery_worker_process
):
    celery_worker_process("gpu")
    hyperparameters = {
        "verifier": "tool_call",
        "device": "cpu",
        "batch_size": 4,
        "max_new_tokens": 16,
        "sample_events": 2,
    }
    job = wait_for(
        launch(client, trainer_token, tiny_snapshot, hyperparameters=hyperparameters), ("succeeded", "failed")
    )
    assert job.state == "succeeded", job.error + job.log_tail
    assert MetricPoint.objects.filter(job=job, name="valid_json_rate").exists()
    assert Sample.objects.filter(job=job).count() == 2
    run = EvalRun.objects.get(job=job)
    assert len(run.results) == 5 and "correct_tool_rate" in run.metrics and run.recommendation["method"]
    assert run.snapshot == tiny_snapshot
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("training:job_detail", args=[job.id])).content.decode()
    assert "Per task (5)" in page and "Per failure bucket" in page and tiny_snapshot.content_hash[:10] in page


@pytest.mark.slow
def test_a_grpo_job_launched_through_the_api_runs_on_a_real_worker(
    client, trainer_token, tiny_train_snapshot, tmp_path, celery_worker_process
):
    celery_worker_process("gpu")
    tiny_snapshot = other_heldout_snapshot(tmp_path)
    hyperparameters = {"num_generations": 4, "max_steps": 4, "max_completion_length": 16, "eval_interval": 2,
                       "checkpoint_interval": 2, "heldout_sample_size": 3, "eval_max_new_tokens": 16,
                       "max_truncated_share": 1.0, "sample_events": 2, "device": "cpu"}  # fmt: skip
    job = launch(client, trainer_token, tiny_train_snapshot, kind="grpo", hyperparameters=hyperparameters,
                 heldout_snapshot=tiny_snapshot.content_hash)  # fmt: skip
    assert job.heldout_snapshot == tiny_snapshot
    job = wait_for(job, ("succeeded", "failed"), timeout=300)
    assert job.state == "succeeded", job.error + job.log_tail
    names = set(MetricPoint.objects.filter(job=job).values_list("name", flat=True))
    assert {"reward/mean", "tied_group_fraction", "completion_length", "heldout/correct_arguments_rate"} <= names
    assert Sample.objects.filter(job=job, step=4).count() == 2
    assert "checkpoint at step 4" in job.log_tail
    adapter = job.result["files"]["adapter_dir"]
    assert adapter.startswith(job.run_dir) and (Path(adapter) / "manifest.json").is_file()


def other_heldout_snapshot(tmp_path):
    """Held-out tasks unlike the tiny train tasks (the same prompts may not sit in both splits)."""
    lines = []
    for line in TINY_TASKS.read_text().splitlines():
        task = json.loads(line)
        task["id"] = f"heldout-{task['id']}"
        task["messages"][-1]["content"] += " Please answer for the held-out check."
        lines.append(json.dumps(task))
    path = tmp_path / "heldout.jsonl"
    path.write_text("\n".join(lines) + "\n")
    tasks_import(actor=None, candidates=read(path, "native"), split="heldout", agent=None, source_ref="other")
    return snapshot_create(actor=None, name="other-heldout", split="heldout")


def test_a_running_job_cancelled_from_the_page_stops_within_the_grace_period(
    client, make_user, trainer_token, tiny_train_snapshot, celery_worker_process
):
    celery_worker_process("gpu", env=scripted_env())
    job = launch(client, trainer_token, tiny_train_snapshot, kind="grpo", hyperparameters={"max_steps": 10_000})
    wait_for(job, ("running",))
    pids = pids_of(job)
    client.force_login(make_user(Role.TRAINER))
    client.post(reverse("training:job_cancel", args=[job.id]))
    cancelled_at = time.monotonic()
    job = wait_for(job, ("cancelled", "failed", "succeeded"), timeout=30)
    assert job.state == "cancelled" and time.monotonic() - cancelled_at < 3 + 1 + 5
    assert not alive(pids["trainer"]) and not alive(pids["child"])
    assert MetricPoint.objects.filter(job=job).exists()


def test_a_killed_worker_loses_no_job_and_leaves_no_trainer(
    client, trainer_token, tiny_train_snapshot, celery_worker_process
):
    worker = celery_worker_process("gpu", env=scripted_env())
    job = launch(client, trainer_token, tiny_train_snapshot, kind="grpo", hyperparameters={"max_steps": 25})
    wait_for(job, ("running",))
    pids = pids_of(job)
    worker.kill()
    worker.wait()
    time.sleep(1)
    assert not alive(pids["trainer"])
    job.refresh_from_db()
    requeued = services.jobs_reap(stale_after=timedelta(seconds=0))
    assert [j.pk for j in requeued] == [job.pk], (job.state, job.heartbeat_at, job.attempts)
    celery_worker_process("gpu", env=scripted_env())
    job = wait_for(job, ("succeeded", "failed"))
    assert job.state == "succeeded" and job.attempts == 2
    assert MetricPoint.objects.filter(job=job, attempt=2).count() == 25


def test_a_job_out_of_attempts_ends_failed_with_the_reason(trainer_token, tiny_snapshot, client):
    job = Job.objects.create(kind="eval", snapshot=tiny_snapshot, base_model="x", state="running", attempts=3)
    Job.objects.filter(pk=job.pk).update(heartbeat_at=job.created_at - timedelta(hours=1))
    services.jobs_reap()
    job.refresh_from_db()
    assert job.state == "failed" and "worker lost after 3 attempt(s)" in job.error


def test_a_trainer_that_cannot_start_fails_the_attempt_with_the_reason(tiny_snapshot, settings, tmp_path):
    settings.TRAINER_COMMAND = [str(tmp_path / "no-such-trainer")]
    job = Job.objects.create(kind="eval", snapshot=tiny_snapshot, base_model="x")
    runner.job_run(job_id=job.pk, worker="w")
    job.refresh_from_db()
    assert job.state == "failed" and job.attempts == 1 and job.finished_at is not None
    assert job.error.startswith("not_started: the trainer could not start: [Errno 2]"), job.error


def test_an_attempt_lost_while_relaying_leaves_no_trainer_behind(tiny_snapshot, settings, monkeypatch):
    settings.TRAINER_COMMAND = [sys.executable, "-c", "import time; time.sleep(120)"]
    started = {}
    monkeypatch.setattr(services, "job_started", lambda *, job, run_dir, pid: started.update(pid=pid))

    def heartbeat_without_a_database(*, job):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(services, "job_heartbeat", heartbeat_without_a_database)
    job = Job.objects.create(kind="eval", snapshot=tiny_snapshot, base_model="x")
    with pytest.raises(OperationalError):
        runner.job_run(job_id=job.pk, worker="w")
    assert started["pid"] and not alive(started["pid"])


def test_a_database_error_before_the_claim_retries_the_task_instead_of_stranding_the_job(monkeypatch):
    real_claim, calls = services.job_claim, []

    def claim_after_a_restart(**kwargs):
        calls.append(kwargs["job_id"])
        if len(calls) == 1:
            raise OperationalError("the database system is starting up")
        return real_claim(**kwargs)

    monkeypatch.setattr(services, "job_claim", claim_after_a_restart)
    run_job.apply(args=["00000000-0000-0000-0000-000000000000"])  # no such job: the second claim finds none
    assert calls == ["00000000-0000-0000-0000-000000000000"] * 2


def test_a_duplicate_delivery_does_not_start_a_second_run(
    trainer_token, tiny_train_snapshot, client, celery_worker_process
):
    celery_worker_process("gpu", env=scripted_env())
    job = launch(client, trainer_token, tiny_train_snapshot, kind="grpo", hyperparameters={"max_steps": 15})
    wait_for(job, ("running",))
    assert runner.job_run(job_id=job.pk, worker="duplicate") is None
    job = wait_for(job, ("succeeded", "failed"))
    assert job.attempts == 1 and job.state == "succeeded"


def test_a_viewer_cannot_launch_or_cancel(client, make_user, tiny_snapshot):
    viewer_token = api_token_create(user=make_user(Role.VIEWER), name="x")[1]
    response = client.post(reverse("training:api_jobs"), {}, content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {viewer_token}")  # fmt: skip
    assert response.status_code == 403
    job = Job.objects.create(kind="eval", snapshot=tiny_snapshot, base_model="x")
    client.force_login(make_user(Role.VIEWER))
    assert client.post(reverse("training:job_cancel", args=[job.id])).status_code == 403


def test_a_launch_with_an_unrunnable_kind_or_unknown_snapshot_is_refused_before_queueing(
    client, trainer_token, tiny_snapshot
):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {trainer_token}"}
    url = reverse("training:api_jobs")
    unknown = client.post(url, {"kind": "deploy", "snapshot": tiny_snapshot.content_hash, "base_model": "demo"},
                          content_type="application/json", **headers)  # fmt: skip
    assert unknown.status_code == 400 and "cannot run" in unknown.json()["error"]
    gate = client.post(url, {"kind": "gate", "snapshot": tiny_snapshot.content_hash, "base_model": "demo"},
                       content_type="application/json", **headers)  # fmt: skip
    assert gate.status_code == 400 and "name the candidate's adapter" in gate.json()["error"]
    on_heldout = client.post(url, {"kind": "grpo", "snapshot": tiny_snapshot.content_hash, "base_model": "demo"},
                             content_type="application/json", **headers)  # fmt: skip
    assert on_heldout.status_code == 400 and "train on a train snapshot" in on_heldout.json()["error"]
    body = {"kind": "eval", "snapshot": tiny_snapshot.content_hash, "base_model": "demo",
            "hyperparameters": {"batch_size": "eight"}}
    bad_knob = client.post(url, body, content_type="application/json", **headers)
    assert bad_knob.status_code == 400 and "'batch_size' must be int" in bad_knob.json()["error"]
    missing = client.post(
        url, {"kind": "eval", "snapshot": "nope", "base_model": "demo"}, content_type="application/json", **headers
    )
    assert missing.status_code == 400 and "no snapshot" in missing.json()["error"]
    assert not Job.objects.exists()


def test_only_the_teams_environments_the_operator_listed_can_be_named_in_a_launch(
    client, trainer_token, tiny_snapshot, settings
):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {trainer_token}"}
    url = reverse("training:api_jobs")

    def launch_in(environment):
        body = {"kind": "eval", "snapshot": tiny_snapshot.content_hash, "base_model": "demo",
                "hyperparameters": {"environment": environment, "max_turns": 4}}  # fmt: skip
        return client.post(url, body, content_type="application/json", **headers)

    settings.TRAINER_ENVIRONMENTS = ["trainer.examples.orders:environment"]
    for unlisted in ("mcp:sh -c 'rm -rf ~'", "os:system"):
        refused = launch_in(unlisted)
        assert refused.status_code == 400 and "not one this installation allows" in refused.json()["error"]
    assert not Job.objects.exists()
    assert launch_in("trainer.examples.orders:environment").status_code == 201
    assert launch_in("workbench").status_code == 201
