"""Celery tasks of the ingest app (queue `default`)."""

from __future__ import annotations

from celery import shared_task

from flywheel.ingest.services import upload_process


@shared_task(name="flywheel.ingest.tasks.process_upload")
def process_upload(upload_id: str) -> None:
    """Ingest one upload; a second delivery finds it claimed and does nothing."""
    upload_process(upload_id=upload_id)
