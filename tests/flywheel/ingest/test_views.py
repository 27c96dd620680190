from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone

from flywheel.core.roles import Role
from flywheel.ingest.models import Trajectory, Upload
from flywheel.ingest.parsers import FieldMapping
from flywheel.ingest.services import IngestOptions, stream_ingest
from tests.flywheel.ingest.conftest import TAU_MAPPING

pytestmark = pytest.mark.django_db


def store(records: list[dict], **options) -> None:
    data = b"".join(json.dumps(record).encode() + b"\n" for record in records)
    stream_ingest(stream=io.BytesIO(data), options=IngestOptions(**options))


def native(external_id: str, **extra) -> dict:
    return {"id": external_id, "steps": [{"kind": "user", "text": f"question {external_id}"}], **extra}


@pytest.fixture
def viewer_client(client, make_user):
    client.force_login(make_user(Role.VIEWER))
    return client


def listed(client, **params) -> set[str]:
    response = client.get(reverse("ingest:trajectory_list"), params)
    assert response.status_code == 200
    return {t.external_id for t in response.context["trajectories"]}


def test_the_list_filters_by_outcome_agent_version_error_and_text(viewer_client):
    store(
        [
            native("a", outcome="failure", agent="bot", model_version="bot:v1"),
            native("b", outcome="success", agent="bot", model_version="bot:v2"),
            {"id": "c", "agent": "other", "steps": [{"kind": "error", "text": "Timeout calling refund"}]},
        ]
    )
    assert listed(viewer_client, outcome="failure") == {"a"}
    assert listed(viewer_client, agent="bot") == {"a", "b"}
    assert listed(viewer_client, model_version="bot:v2") == {"b"}
    assert listed(viewer_client, error="true") == {"c"}
    assert listed(viewer_client, error="false") == {"a", "b"}
    assert listed(viewer_client, q="TIMEOUT calling") == {"c"}


def test_the_list_leaves_the_agent_s_tool_catalogue_unread(viewer_client):
    # A catalogue can be hundreds of kilobytes, read again with every row of the page.
    store([native("a", tools=[{"type": "function", "function": {"name": "get_order", "parameters": {}}}])])
    response = viewer_client.get(reverse("ingest:trajectory_list"))
    assert "tools" in response.context["trajectories"][0].agent.get_deferred_fields()


def test_the_list_filters_by_tool_called_and_date(viewer_client, tau_bench_path):
    with tau_bench_path.open("rb") as stream:
        stream_ingest(
            stream=stream, options=IngestOptions(format="openai-chat", mapping=FieldMapping.from_pairs(TAU_MAPPING))
        )
    with_cancel = listed(viewer_client, tool="cancel_reservation")
    assert with_cancel and len(with_cancel) < 50
    assert all(
        Trajectory.objects.get(external_id=ext).steps.filter(tool_name="cancel_reservation").exists()
        for ext in with_cancel
    )
    today = timezone.localdate()
    assert len(listed(viewer_client, since=today.isoformat())) == 50  # first page
    assert listed(viewer_client, until=(today - timedelta(days=1)).isoformat()) == set()


def test_keyset_pages_cover_every_row_once(viewer_client, settings):
    settings.INGEST_BATCH_SIZE = 7
    store([native(str(n)) for n in range(120)])
    seen: list[str] = []
    params: dict[str, str] = {}
    for _ in range(5):
        response = viewer_client.get(reverse("ingest:trajectory_list"), params)
        seen += [t.external_id for t in response.context["trajectories"]]
        if not response.context["next_query"]:
            break
        params = dict(pair.split("=", 1) for pair in response.context["next_query"].split("&") if pair)
    assert len(seen) == 120 and set(seen) == {str(n) for n in range(120)}


def test_a_garbled_cursor_shows_the_first_page(viewer_client):
    store([native("only")])
    assert listed(viewer_client, after="%%%not-a-cursor") == {"only"}


def test_the_trace_viewer_escapes_stored_text(viewer_client):
    store(
        [
            {
                "id": "x",
                "steps": [
                    {"kind": "user", "text": "<script>alert('pwned')</script>"},
                    {"kind": "tool_call", "tool": "t", "arguments": "{not json"},
                ],
            }
        ]
    )
    trajectory = Trajectory.objects.get()
    page = viewer_client.get(reverse("ingest:trajectory_detail", args=[trajectory.id])).content.decode()
    assert "<script>alert(" not in page and "&lt;script&gt;alert(" in page
    assert "Arguments are not valid JSON" in page and "{not json" in page


def test_the_trace_viewer_shows_a_tau_bench_conversation(viewer_client, tau_bench_path):
    with tau_bench_path.open("rb") as stream:
        stream_ingest(
            stream=stream, options=IngestOptions(format="openai-chat", mapping=FieldMapping.from_pairs(TAU_MAPPING))
        )
    trajectory = Trajectory.objects.get(external_id="0:0")
    page = viewer_client.get(reverse("ingest:trajectory_detail", args=[trajectory.id])).content.decode()
    assert "get_user_details" in page and "mia_li_3668" in page and "Airline Agent Policy" in page


def test_an_upload_over_the_size_limit_gets_413_and_stores_nothing(client, make_user, settings):
    settings.INGEST_MAX_UPLOAD_BYTES = 1000
    client.force_login(make_user(Role.REVIEWER))
    big = SimpleUploadedFile("big.jsonl", b"x" * 200_000)
    response = client.post(reverse("ingest:upload_new"), {"file": big, "format": "auto"})
    assert response.status_code == 413
    assert "larger than the limit" in response.content.decode()
    assert not Upload.objects.exists()


def test_an_upload_is_stored_and_queued(client, make_user, tau_bench_path):
    client.force_login(make_user(Role.REVIEWER))
    with tau_bench_path.open("rb") as handle:
        response = client.post(
            reverse("ingest:upload_new"),
            {"file": handle, "format": "openai-chat", "mapping": "messages=traj outcome=reward id=task_id,trial"},
        )
    upload = Upload.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("ingest:upload_detail", args=[upload.id])
    assert upload.status == Upload.Status.QUEUED and upload.size == tau_bench_path.stat().st_size
    assert upload.mapping["messages"] == "traj" and upload.mapping["id"] == "task_id,trial"


def test_a_bad_mapping_is_shown_on_the_form(client, make_user):
    client.force_login(make_user(Role.REVIEWER))
    response = client.post(
        reverse("ingest:upload_new"), {"file": SimpleUploadedFile("a.jsonl", b"{}\n"), "format": "auto", "mapping": "x"}
    )
    assert response.status_code == 200 and "is not KEY=FIELD" in response.content.decode()
    assert not Upload.objects.exists()
