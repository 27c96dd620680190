"""An ingestion batch that loses its connection at the progress save runs again whole and is counted once,
with the agent it created (rolled back with it) created again."""

from __future__ import annotations

import io
import json

import psycopg
import pytest
from django.db import OperationalError

from flywheel.core import db
from flywheel.core.models import Agent
from flywheel.ingest.models import Trajectory
from flywheel.ingest.services import IngestOptions, IngestReport, stream_ingest


def lines(count: int) -> bytes:
    return b"".join(json.dumps({"id": f"r{n}", "steps": [{"kind": "user", "text": f"q{n}"}]}).encode() + b"\n"
                    for n in range(count))  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_a_batch_cut_off_at_its_progress_save_is_stored_and_counted_once(settings, monkeypatch):
    settings.INGEST_BATCH_SIZE = 3
    monkeypatch.setattr(db.time, "sleep", lambda seconds: None)
    saved: list[tuple[int, int]] = []

    def save_progress(report: IngestReport) -> None:
        saved.append((report.read, report.stored))
        if len(saved) == 1:  # the first batch's rows (and its new agent) are written; its commit never comes
            error = OperationalError("server closed the connection unexpectedly")
            error.__cause__ = psycopg.OperationalError("server closed the connection unexpectedly")
            raise error

    report = stream_ingest(stream=io.BytesIO(lines(7)), options=IngestOptions(format="native", agent="bot"),
                           on_batch=save_progress)  # fmt: skip
    assert (report.read, report.stored, report.duplicates, report.rejected) == (7, 7, 0, 0)
    assert saved == [(3, 3), (3, 3), (6, 6), (7, 7)]  # the first batch counted again from nothing, not on top
    assert sorted(Trajectory.objects.values_list("external_id", flat=True)) == [f"r{n}" for n in range(7)]
    assert Agent.objects.filter(name="bot").count() == 1
