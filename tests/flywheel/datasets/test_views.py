from __future__ import annotations

import json

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.datasets.models import RegressionTask, TaskSetSnapshot
from flywheel.datasets.services import snapshot_create
from tests.flywheel.datasets.conftest import WORKBENCH, import_file

pytestmark = pytest.mark.django_db


@pytest.fixture
def email_tasks():
    import_file(WORKBENCH / "email_queries_and_answers.csv", "workbench", "heldout")


def test_the_task_list_filters_and_breaks_down_per_tool(client, make_user, email_tasks):
    client.force_login(make_user(Role.VIEWER))
    response = client.get(reverse("datasets:task_list"), {"split": "heldout", "environment": "workbench"})
    assert response.status_code == 200 and response.context["page"].paginator.count == 90
    tools = dict(response.context["breakdown"]["tools"])
    assert tools["email_send_email"] > 0 and "(no call expected)" in tools
    assert client.get(reverse("datasets:task_list"), {"split": "train"}).context["page"].paginator.count == 0


def test_a_reviewer_edits_a_task_and_a_schema_violation_is_shown(client, make_user, email_tasks):
    client.force_login(make_user(Role.REVIEWER))
    task = RegressionTask.objects.get(external_id="email_0")
    url = reverse("datasets:task_edit", args=[task.id])
    form = client.get(url).context["form"]
    data = {**form.initial, "note": "tighten"}
    calls = json.loads(data["expected_calls"])
    calls[0]["arguments"]["unexpected"] = [1]
    calls[0]["arguments"][next(iter(calls[0]["arguments"]))] = [12345]
    response = client.post(url, {**data, "expected_calls": json.dumps(calls)})
    assert response.status_code == 200 and "does not fit its schema" in response.content.decode()
    response = client.post(url, {**data, "split": "heldout"})
    assert response.status_code == 302
    task.refresh_from_db()
    assert task.revision == 2


def test_a_viewer_cannot_edit(client, make_user, email_tasks):
    client.force_login(make_user(Role.VIEWER))
    task = RegressionTask.objects.first()
    assert client.post(reverse("datasets:task_edit", args=[task.id]), {}).status_code == 403


def test_a_snapshot_page_shows_its_hash_and_exports_jsonl(client, make_user, email_tasks):
    snapshot = snapshot_create(actor=None, name="held", split="heldout")
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("datasets:snapshot_detail", args=[snapshot.id])).content.decode()
    assert snapshot.content_hash in page
    export = client.get(reverse("datasets:snapshot_export", args=[snapshot.id, "trl"]))
    lines = b"".join(export.streaming_content).decode().splitlines()
    assert len(lines) == 90 and "prompt" in json.loads(lines[0])


def test_a_reviewer_freezes_a_stratified_sample_and_an_empty_split_is_refused_in_the_form(
    client, make_user, email_tasks
):
    reviewer = make_user(Role.REVIEWER)
    client.force_login(reviewer)
    form = {"name": "email held-out 20", "split": "heldout", "sample_size": 20, "stratify_by": "category", "seed": 3}
    response = client.post(reverse("datasets:snapshot_new"), form)
    snapshot = TaskSetSnapshot.objects.get(name="email held-out 20")
    assert response.status_code == 302 and response["Location"] == reverse(
        "datasets:snapshot_detail", args=[snapshot.id]
    )
    assert (snapshot.task_count, snapshot.split, snapshot.created_by) == (20, "heldout", reviewer)
    assert snapshot.selection == {"split": "heldout", "agent": None, "sample_size": 20, "stratify_by": "category",
                                  "seed": 3}  # fmt: skip

    refused = client.post(reverse("datasets:snapshot_new"), {**form, "name": "nothing", "split": "train"})
    assert refused.status_code == 200 and "no train tasks to snapshot" in refused.content.decode()
    assert not TaskSetSnapshot.objects.filter(name="nothing").exists()


def test_only_task_editors_see_and_use_the_snapshot_form(client, make_user, email_tasks):
    client.force_login(make_user(Role.TRAINER))
    assert "Freeze the snapshot" not in client.get(reverse("datasets:snapshot_list")).content.decode()
    response = client.post(reverse("datasets:snapshot_new"), {"name": "x", "split": "heldout", "seed": 0})
    assert response.status_code == 403 and not TaskSetSnapshot.objects.exists()
