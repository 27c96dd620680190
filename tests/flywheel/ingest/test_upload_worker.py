"""A real Celery worker processes an upload end to end, through the page."""

from __future__ import annotations

import time

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.ingest.models import Trajectory, Upload

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def wait_until_finished(upload: Upload, timeout: float = 90) -> Upload:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        upload.refresh_from_db()
        if upload.is_finished:
            return upload
        time.sleep(0.3)
    raise AssertionError(f"upload still {upload.status} after {timeout} s")


def test_a_worker_ingests_an_upload_and_progress_reaches_100(client, make_user, celery_worker_process, tau_bench_path):
    celery_worker_process("default")
    client.force_login(make_user(Role.REVIEWER))
    with tau_bench_path.open("rb") as handle:
        client.post(
            reverse("ingest:upload_new"),
            {"file": handle, "format": "openai-chat", "mapping": "messages=traj outcome=reward id=task_id,trial"},
        )
    upload = wait_until_finished(Upload.objects.get())
    assert upload.status == Upload.Status.SUCCEEDED and upload.percent == 100
    assert (upload.read, upload.stored, upload.rejected) == (200, 200, 0)
    assert Trajectory.objects.filter(upload=upload).count() == 200
    fragment = client.get(reverse("ingest:upload_progress", args=[upload.id])).content.decode()
    assert 'aria-valuenow="100"' in fragment and "hx-trigger" not in fragment
