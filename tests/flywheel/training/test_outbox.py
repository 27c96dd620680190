"""The outbox: an upload and a job launched while the broker is down are committed, re-sent by the sweepers once
it is back, and run once each, however many messages they got. A private redis-server is the broker here, so
stopping it disturbs no one."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone
from kombu.exceptions import OperationalError

from flywheel.celery import app
from flywheel.core.roles import Role
from flywheel.core.services import api_token_create
from flywheel.ingest.models import Trajectory, Upload
from flywheel.ingest.services import uploads_sweep
from flywheel.training import tasks
from flywheel.training.models import Job
from flywheel.training.services import jobs_reap, jobs_redispatch
from tests.flywheel.training.conftest import TINY_MODEL, scripted_env, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
NO_TIME = timedelta(0)


class PrivateBroker:
    """A redis-server of this test's own on a free port; start() and stop() at will."""

    def __init__(self, folder) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.folder, self.process = folder, None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                   "--dir", str(self.folder)]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise AssertionError("the private redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


def drop_celery_connections() -> None:
    """This process's Celery app connects afresh, to the broker CELERY_BROKER_URL names now (Celery reads the
    variable before its settings)."""
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def broker(tmp_path, monkeypatch) -> Iterator[PrivateBroker]:
    private = PrivateBroker(tmp_path)
    private.start()
    monkeypatch.setenv("CELERY_BROKER_URL", private.url)  # workers started by the test inherit it too
    drop_celery_connections()
    yield private
    monkeypatch.undo()
    drop_celery_connections()
    private.stop()


@pytest.mark.worker
@pytest.mark.slow
def test_an_upload_and_a_launch_while_the_broker_is_down_run_once_it_is_back(
    broker, client, make_user, tiny_train_snapshot, celery_worker_process
):
    broker.stop()
    trainer = make_user(Role.TRAINER)
    client.force_login(make_user(Role.REVIEWER))
    page = client.post(reverse("ingest:upload_new"), {"file": SimpleUploadedFile(
        "three.jsonl", b"".join(b'{"id": "r%d", "steps": [{"kind": "user", "text": "hi"}]}\n' % n for n in range(3))),
        "format": "native"})  # fmt: skip
    api = client.post(reverse("training:api_jobs"), {"kind": "grpo", "snapshot": tiny_train_snapshot.content_hash,
                      "base_model": str(TINY_MODEL), "hyperparameters": {"max_steps": 3}},
                      content_type="application/json",
                      HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=trainer, name='ci')[1]}")  # fmt: skip
    assert page.status_code == 302 and api.status_code == 201, (page.status_code, api.content)
    upload, job = Upload.objects.get(), Job.objects.get()
    assert (upload.status, upload.dispatched_at, job.state, job.dispatched_at) == ("queued", None, "queued", None)

    broker.start()
    assert uploads_sweep(grace=NO_TIME) == [upload.id] and jobs_redispatch(grace=NO_TIME) == [job.id]
    # A second send of each before any worker runs: each now has two messages waiting.
    assert uploads_sweep(grace=NO_TIME, resend_after=NO_TIME) == [upload.id]
    assert jobs_redispatch(grace=NO_TIME, resend_after=NO_TIME) == [job.id]
    celery_worker_process("default,gpu", env=scripted_env())
    job = wait_for(job, ("succeeded", "failed"))
    deadline = time.monotonic() + 60
    while not upload.is_finished and time.monotonic() < deadline:
        time.sleep(0.2)
        upload.refresh_from_db()
    assert (job.state, job.attempts) == ("succeeded", 1), job.error
    assert (upload.status, upload.attempts, upload.stored, upload.duplicates) == ("succeeded", 1, 3, 0)
    assert Trajectory.objects.count() == 3
    time.sleep(2)  # the duplicate messages are consumed by now: they changed nothing
    job.refresh_from_db()
    upload.refresh_from_db()
    assert (job.attempts, upload.attempts) == (1, 1)


@pytest.mark.django_db(transaction=True)
def test_the_reapers_requeue_while_the_broker_is_down_is_sent_by_the_next_sweep(tiny_snapshot, monkeypatch):
    job = Job.objects.create(kind="eval", snapshot=tiny_snapshot, base_model="x", state="running", attempts=1,
                             dispatched_at=timezone.now() - timedelta(hours=1))  # fmt: skip
    Job.objects.filter(pk=job.pk).update(heartbeat_at=job.created_at - timedelta(hours=1))

    def refuse(job_id):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(tasks.run_job, "delay", refuse)
    assert [reaped.pk for reaped in jobs_reap()] == [job.pk]  # no exception escapes
    job.refresh_from_db()
    assert (job.state, job.dispatched_at) == ("queued", None)
    sent: list[str] = []
    monkeypatch.setattr(tasks.run_job, "delay", sent.append)
    assert jobs_redispatch(grace=NO_TIME) == [job.pk] and sent == [str(job.pk)]
    job.refresh_from_db()
    assert job.dispatched_at is not None


def test_run_job_retries_database_errors_a_bounded_number_of_times_with_jitter():
    assert tasks.run_job.max_retries == tasks.DATABASE_RETRIES and tasks.DATABASE_RETRIES <= 10
    assert tasks.run_job.retry_jitter and tasks.run_job.retry_backoff_max <= 300
