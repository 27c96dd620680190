"""Uploads that survive their worker: a guarded claim, progress committed with each batch, a resume after it,
a partly read file ended `partial`, and the raw file deleted once processed."""

from __future__ import annotations

import gzip
import io
import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from flywheel.core.roles import Role
from flywheel.ingest import services
from flywheel.ingest.models import Trajectory, Upload
from flywheel.ingest.services import IngestOptions, stream_ingest, upload_create, upload_process

pytestmark = pytest.mark.django_db


def lines(count: int, start: int = 0) -> bytes:
    return b"".join(
        json.dumps({"id": f"r{n}", "steps": [{"kind": "user", "text": f"question {n}"}]}).encode() + b"\n"
        for n in range(start, start + count)
    )


@pytest.fixture
def new_upload(make_user):
    user = make_user(Role.REVIEWER)

    def make(data: bytes, name: str = "records.jsonl", **fields) -> Upload:
        return upload_create(user=user, file=SimpleUploadedFile(name, data), format="native", mapping={}, **fields)

    return make


class WorkerKilled(BaseException):
    """Stands for SIGKILL: nothing after it runs, no handler catches it."""


def kill_at_progress_save(monkeypatch, number: int) -> None:
    """The worker dies inside the `number`-th batch's transaction: that batch is rolled back, the earlier ones stay."""
    real, calls = services._upload_progress_save, []

    def save(*args, **kwargs):
        calls.append(1)
        if len(calls) == number:
            raise WorkerKilled
        return real(*args, **kwargs)

    monkeypatch.setattr(services, "_upload_progress_save", save)


def go_stale(upload: Upload) -> None:
    Upload.objects.filter(pk=upload.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))


def test_a_redelivered_upload_continues_after_the_last_committed_batch(new_upload, settings, monkeypatch):
    settings.INGEST_BATCH_SIZE = 4
    upload = new_upload(lines(10))
    kill_at_progress_save(monkeypatch, 2)
    with pytest.raises(WorkerKilled):
        upload_process(upload_id=upload.id)
    upload.refresh_from_db()
    assert (upload.status, upload.read, upload.stored, upload.lines_read) == ("running", 4, 4, 4)
    assert Trajectory.objects.count() == 4  # the second batch rolled back with its progress
    monkeypatch.undo()
    go_stale(upload)
    upload = upload_process(upload_id=upload.id)
    assert (upload.status, upload.attempts) == ("succeeded", 2)
    assert (upload.read, upload.stored, upload.duplicates, upload.rejected) == (10, 10, 0, 0)
    assert sorted(Trajectory.objects.values_list("external_id", flat=True)) == sorted(f"r{n}" for n in range(10))


def test_a_resumed_upload_keeps_the_rejections_of_the_attempt_before(new_upload, settings, monkeypatch):
    settings.INGEST_BATCH_SIZE = 2
    upload = new_upload(lines(2) + b"not json\n" + lines(4, start=2))
    kill_at_progress_save(monkeypatch, 3)
    with pytest.raises(WorkerKilled):
        upload_process(upload_id=upload.id)
    monkeypatch.undo()
    go_stale(upload)
    upload = upload_process(upload_id=upload.id)
    assert (upload.read, upload.stored, upload.rejected, upload.duplicates) == (7, 6, 1, 0)
    assert [error["line"] for error in upload.errors] == [3]


def test_a_claim_on_a_running_upload_whose_worker_is_alive_does_nothing(new_upload):
    upload = new_upload(lines(3))
    Upload.objects.filter(pk=upload.pk).update(status="running", attempts=1, heartbeat_at=timezone.now())
    assert upload_process(upload_id=upload.id) is None
    upload.refresh_from_db()
    assert (upload.status, upload.attempts, upload.read) == ("running", 1, 0)
    assert not Trajectory.objects.exists()


def test_a_worker_taken_for_lost_stops_without_writing(new_upload, settings, monkeypatch):
    settings.INGEST_BATCH_SIZE = 2
    upload = new_upload(lines(6))
    real = services._upload_progress_save

    def taken_over_meanwhile(target, report, **kwargs):
        Upload.objects.filter(pk=target.pk).update(attempts=target.attempts + 1)  # another claim
        return real(target, report, **kwargs)

    monkeypatch.setattr(services, "_upload_progress_save", taken_over_meanwhile)
    with pytest.raises(services.UploadLost):
        upload_process(upload_id=upload.id)
    assert not Trajectory.objects.exists()  # the batch went back with its progress


def test_an_upload_out_of_attempts_is_not_claimed_again(new_upload, settings):
    settings.INGEST_MAX_ATTEMPTS = 2
    upload = new_upload(lines(3))
    Upload.objects.filter(pk=upload.pk).update(status="running", attempts=2)
    go_stale(upload)
    assert upload_process(upload_id=upload.id) is None


def test_a_truncated_gzip_ends_partial_with_the_reason(new_upload):
    packed = gzip.compress(lines(2000))
    upload = upload_process(upload_id=new_upload(packed[: len(packed) * 2 // 3], name="cut.jsonl.gz").id)
    assert upload.status == Upload.Status.PARTIAL and upload.is_finished
    assert "corrupt or truncated" in upload.failure
    assert 0 < upload.stored < 2000 and upload.stored == Trajectory.objects.count()


def test_an_empty_file_ends_failed(new_upload):
    upload = upload_process(upload_id=new_upload(b"").id)
    assert (upload.status, upload.failure) == ("failed", "the file is empty")


def test_a_whole_file_ends_succeeded(new_upload):
    upload = upload_process(upload_id=new_upload(lines(3) + b"[]\n").id)
    assert (upload.status, upload.stored, upload.rejected, upload.failure) == ("succeeded", 3, 1, "")


def stored_file(upload: Upload) -> Path:
    return Path(upload.file.path)


def test_the_raw_file_is_deleted_after_success(new_upload):
    upload = new_upload(lines(3))
    raw = stored_file(upload)
    assert raw.exists()
    upload = upload_process(upload_id=upload.id)
    assert not raw.exists() and not upload.file


def test_the_raw_file_is_kept_when_the_retention_setting_says_so(new_upload, settings):
    settings.INGEST_KEEP_RAW_UPLOADS = True
    upload = new_upload(lines(3))
    upload = upload_process(upload_id=upload.id)
    assert upload.status == "succeeded" and stored_file(upload).exists()


def test_the_raw_file_is_never_kept_when_redaction_was_asked_for(new_upload, settings):
    settings.INGEST_KEEP_RAW_UPLOADS = True
    upload = new_upload(lines(3), redact_patterns=["email"])
    raw = stored_file(upload)
    upload = upload_process(upload_id=upload.id)
    assert upload.status == "succeeded" and not raw.exists() and not upload.file


def test_a_redacted_file_is_deleted_even_when_reading_stopped_partway(new_upload):
    packed = gzip.compress(lines(2000))
    upload = new_upload(packed[: len(packed) // 2], name="cut.jsonl.gz", redact_patterns=["email"])
    raw = stored_file(upload)
    upload = upload_process(upload_id=upload.id)
    assert upload.status == "partial" and not raw.exists()


def test_a_partly_read_file_without_redaction_is_kept_for_a_look(new_upload):
    packed = gzip.compress(lines(2000))
    upload = new_upload(packed[: len(packed) // 2], name="cut.jsonl.gz")
    upload = upload_process(upload_id=upload.id)
    assert upload.status == "partial" and stored_file(upload).exists()


def test_progress_is_committed_on_time_even_while_no_batch_fills(settings):
    """Lines that are all rejected fill no batch; the heartbeat must move anyway, or the upload looks lost."""
    settings.INGEST_PROGRESS_SECONDS = 0
    saves: list[int] = []
    data = io.BytesIO(b"not json\n" * 3 + lines(1))
    stream_ingest(
        stream=data, options=IngestOptions(format="native"), on_batch=lambda report: saves.append(report.read)
    )
    assert saves[:4] == [1, 2, 3, 4], saves
