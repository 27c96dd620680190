"""A real worker SIGKILLed in the middle of a 100,000-record upload, then another one: nothing lost, nothing twice."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core.files import File

from flywheel.celery import app
from flywheel.core.roles import Role
from flywheel.ingest.models import Trajectory, Upload
from flywheel.ingest.services import upload_create, uploads_sweep

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
RECORDS = 100_000


def wait_for(upload: Upload, done, timeout: float) -> Upload:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        upload.refresh_from_db()
        if done(upload):
            return upload
        time.sleep(0.05)
    raise AssertionError(f"upload {upload.status} at {upload.read} records after {timeout} s")


def test_a_worker_killed_mid_upload_loses_no_record_and_stores_none_twice(make_user, celery_worker_process, tmp_path):
    path = tmp_path / "records.jsonl"
    with path.open("wb") as out:
        for n in range(RECORDS):
            out.write(b'{"id":"r%d","steps":[{"kind":"user","text":"q%d"}]}\n' % (n, n))
    app.control.purge()
    worker = celery_worker_process("default")
    with path.open("rb") as handle:
        upload = upload_create(user=make_user(Role.REVIEWER), file=File(handle, name="records.jsonl"),
                               format="native", mapping={})  # fmt: skip
    upload = wait_for(upload, lambda u: u.read >= 10_000 or u.is_finished, timeout=90)
    worker.kill()
    worker.wait()
    upload.refresh_from_db()
    assert upload.status == "running" and upload.read < RECORDS, (upload.status, upload.read)
    killed_at = upload.read

    celery_worker_process("default")
    assert uploads_sweep(stale_after=timedelta(0), resend_after=timedelta(0)) == [upload.id]
    upload = wait_for(upload, lambda u: u.is_finished, timeout=120)
    assert (upload.status, upload.attempts) == ("succeeded", 2)
    assert (upload.read, upload.stored, upload.duplicates, upload.rejected) == (RECORDS, RECORDS, 0, 0), killed_at
    stored = Trajectory.objects.filter(upload=upload)
    assert stored.count() == RECORDS and stored.values("external_id").distinct().count() == RECORDS
