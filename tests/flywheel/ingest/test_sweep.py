"""The uploads' outbox sweeper: what it re-sends, what it hands back to the queue, what it gives up on."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone
from kombu.exceptions import OperationalError

from flywheel.core.roles import Role
from flywheel.ingest import tasks
from flywheel.ingest.models import Upload
from flywheel.ingest.services import upload_create, upload_dispatch, uploads_sweep

pytestmark = pytest.mark.django_db
LONG_AGO = timezone.now() - timedelta(hours=1)


@pytest.fixture
def sent(monkeypatch) -> list[str]:
    """The messages `process_upload.delay` was given, instead of a broker."""
    messages: list[str] = []
    monkeypatch.setattr(tasks.process_upload, "delay", messages.append)
    return messages


@pytest.fixture
def upload(make_user) -> Upload:
    file = SimpleUploadedFile("one.jsonl", b'{"steps": [{"kind": "user", "text": "hi"}]}\n')
    made = upload_create(user=make_user(Role.REVIEWER), file=file, format="native", mapping={})
    Upload.objects.filter(pk=made.pk).update(updated_at=LONG_AGO)
    return made


def test_a_broker_that_refuses_leaves_the_upload_queued_and_unmarked(upload, monkeypatch):
    def refuse(upload_id):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(tasks.process_upload, "delay", refuse)
    assert upload_dispatch(upload_id=upload.id) is False
    upload.refresh_from_db()
    assert (upload.status, upload.dispatched_at) == ("queued", None)


def test_an_upload_never_sent_is_sent_and_marked(upload, sent):
    assert uploads_sweep() == [upload.id] and sent == [str(upload.id)]
    upload.refresh_from_db()
    assert upload.dispatched_at is not None
    assert uploads_sweep() == []  # sent just now: not again until DISPATCH_RESEND_SECONDS


def test_an_upload_sent_long_ago_and_never_claimed_is_sent_again(upload, sent):
    Upload.objects.filter(pk=upload.pk).update(dispatched_at=LONG_AGO)
    assert uploads_sweep() == [upload.id]


def test_a_running_upload_whose_worker_went_silent_is_queued_again_with_its_progress(upload, sent):
    Upload.objects.filter(pk=upload.pk).update(
        status="running", attempts=1, heartbeat_at=LONG_AGO, dispatched_at=LONG_AGO, read=7, lines_read=9
    )
    assert uploads_sweep() == [upload.id]
    upload.refresh_from_db()
    assert (upload.status, upload.read, upload.lines_read, upload.attempts) == ("queued", 7, 9, 1)


def test_a_running_upload_whose_worker_is_alive_is_left_alone(upload, sent):
    Upload.objects.filter(pk=upload.pk).update(status="running", attempts=1, heartbeat_at=timezone.now())
    assert uploads_sweep() == [] and sent == []


def test_an_upload_whose_worker_was_lost_too_often_fails_with_the_reason(upload, sent, settings):
    settings.INGEST_MAX_ATTEMPTS = 2
    Upload.objects.filter(pk=upload.pk).update(status="running", attempts=2, heartbeat_at=LONG_AGO, lines_read=40)
    assert uploads_sweep() == [] and sent == []
    upload.refresh_from_db()
    assert upload.status == "failed" and upload.failure == "its worker was lost 2 times; reading stopped after line 40"


def test_finished_uploads_are_never_sent(upload, sent):
    Upload.objects.filter(pk=upload.pk).update(status="succeeded", dispatched_at=None)
    assert uploads_sweep() == [] and sent == []


def test_the_sweeper_runs_from_beat_on_default_and_uploads_are_acknowledged_late():
    from flywheel.celery import app

    assert app.conf.beat_schedule["sweep-uploads"]["task"] == tasks.sweep_uploads.name
    assert app.amqp.router.route({}, tasks.sweep_uploads.name)["queue"].name == "default"
    assert tasks.process_upload.acks_late and tasks.process_upload.reject_on_worker_lost
