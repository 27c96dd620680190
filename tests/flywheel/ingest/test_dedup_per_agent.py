"""Dedup is per agent: the same record under two agents is two trajectories, and a duplicate answer names the
caller's agent's trajectory only."""

from __future__ import annotations

import io
import json

import pytest

from flywheel.ingest.models import Trajectory
from flywheel.ingest.reader import RawRecord
from flywheel.ingest.services import IngestOptions, records_ingest, stream_ingest

pytestmark = pytest.mark.django_db
WITH_ID = {"id": "shared-1", "steps": [{"kind": "user", "text": "same words"}]}
WITHOUT_ID = {"steps": [{"kind": "user", "text": "same words, no id"}]}


def _results(options: IngestOptions, record: dict) -> list:
    seen: list = []
    records_ingest(records=[RawRecord(1, dict(record))], options=options, on_result=seen.append)
    return seen


@pytest.mark.parametrize("record", [WITH_ID, WITHOUT_ID], ids=["same source and id", "same content"])
def test_the_same_record_under_two_agents_is_stored_twice(record):
    alpha = _results(IngestOptions(format="native", agent="alpha", source="prod"), record)
    beta = _results(IngestOptions(format="native", agent="beta", source="prod"), record)
    assert [result.status for result in alpha + beta] == ["stored", "stored"]
    assert dict(Trajectory.objects.values_list("agent__name", "id")) == {
        "alpha": alpha[0].trajectory_id,
        "beta": beta[0].trajectory_id,
    }


@pytest.mark.parametrize("record", [WITH_ID, WITHOUT_ID], ids=["same source and id", "same content"])
def test_a_duplicate_answer_names_the_callers_agents_trajectory_only(record):
    alpha = _results(IngestOptions(format="native", agent="alpha", source="prod"), record)
    beta = _results(IngestOptions(format="native", agent="beta", source="prod"), record)
    again = _results(IngestOptions(format="native", agent="beta", source="prod"), record)
    assert again[0].status == "duplicate" and again[0].trajectory_id == beta[0].trajectory_id
    assert again[0].trajectory_id != alpha[0].trajectory_id


def test_a_file_naming_its_agents_per_record_dedupes_within_each(settings):
    settings.INGEST_BATCH_SIZE = 10
    lines = [dict(WITH_ID, agent=agent) for agent in ("alpha", "beta", "alpha")]
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    report = stream_ingest(stream=io.BytesIO(data), options=IngestOptions(format="native", source="prod"))
    assert (report.stored, report.duplicates) == (2, 1)
