"""The correction form, the human-intervention button, and the exports of pairs and corrections: their answers
and permissions (a viewer may not correct; another agent's trajectory is a 404, as everywhere)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from flywheel.core.models import Agent
from flywheel.core.roles import Perm, Role
from flywheel.core.services import api_token_create
from flywheel.datasets.models import PreferencePair, RegressionTask, SnapshotKind, TaskSetSnapshot
from flywheel.ingest.models import Trajectory
from flywheel.triage.models import Correction
from tests.flywheel.triage.conftest import call, result, shop_record, user

pytestmark = pytest.mark.django_db


@pytest.fixture
def refund(store) -> Trajectory:
    steps = [user(), call("refund_order", {"order_id": "17", "amount": 500}, "c1"),
             result("refund_order", "Error: more than the order's total", error=True, call_id="c1"),
             {"kind": "human_intervention", "text": "Supervisor: look the order up first."}]  # fmt: skip
    return store(shop_record("refund-1", steps))["refund-1"]


@pytest.fixture
def reviewer(make_user, refund):
    return make_user(Role.REVIEWER, "rita", agents=[refund.agent])


def _correct(client, trajectory, **fields):
    data = {"step": 1, "kind": "call", "tool": "lookup_order", "arguments": '{"order_id": "17"}', "make_pair": "on",
            "task": "", "pair_split": "train", "note": "", **fields}  # fmt: skip
    return client.post(reverse("triage:review_correct", args=[trajectory.pk]), data)


def test_the_form_opens_on_the_failing_call_with_the_catalogues_tools(client, reviewer, refund):
    client.force_login(reviewer)
    page = client.get(reverse("triage:review_correct", args=[refund.pk])).content.decode()
    assert '<option value="refund_order" selected>' in page and '<option value="lookup_order">' in page
    assert "&quot;amount&quot;: 500" in page and 'name="step" value="1"' in page


def test_a_step_that_is_not_the_agents_opens_the_form_saying_so(client, reviewer, refund):
    client.force_login(reviewer)
    response = client.get(reverse("triage:review_correct", args=[refund.pk]) + "?step=2")
    assert response.status_code == 200
    assert "step 2 is a tool result step, not the agent&#x27;s call or answer" in response.content.decode()


def test_a_reviewers_correction_is_stored_with_its_pair_and_returns_to_the_review(client, reviewer, refund):
    client.force_login(reviewer)
    response = _correct(client, refund, task="train")
    assert response.status_code == 302 and response["Location"] == reverse("triage:review", args=[refund.pk])
    correction = Correction.objects.get()
    assert correction.reviewer == reviewer and correction.pair.split == "train" and correction.task.split == "train"
    review = client.get(response["Location"]).content.decode()
    assert "Correction of step #1 saved: train task refund-1@step1, a train preference pair." in review
    assert "<h2>Corrections</h2>" in review


@pytest.mark.parametrize(("fields", "error"), [
    ({"tool": "delete_order"}, "delete_order: not an offered tool"),
    ({"arguments": '{"order_id": 17}'}, "argument &#x27;order_id&#x27; must be string, got integer"),
    ({"arguments": '{"order_id": '}, "arguments is not valid JSON"),
    ({"arguments": "[1]"}, "arguments are a JSON object"),
    ({"kind": "answer", "answer": " "}, "write the answer the agent should have given"),
])  # fmt: skip
def test_a_bad_correction_shows_the_form_again_with_why_and_stores_nothing(client, reviewer, refund, fields, error):
    client.force_login(reviewer)
    response = _correct(client, refund, task="heldout", **fields)
    assert response.status_code == 400 and error in response.content.decode()
    assert not (Correction.objects.exists() or PreferencePair.objects.exists() or RegressionTask.objects.exists())


def test_a_viewer_may_not_correct(client, make_user, refund):
    client.force_login(make_user(Role.VIEWER, agents=[refund.agent]))
    assert client.get(reverse("triage:review_correct", args=[refund.pk])).status_code == 403
    assert _correct(client, refund).status_code == 403
    review = client.get(reverse("triage:review", args=[refund.pk])).content.decode()
    assert "data-correct" not in review and not Correction.objects.exists()


def test_a_reviewer_without_the_task_permission_corrects_but_makes_no_task_or_pair(client, make_user, refund):
    triager = make_user(None, agents=[refund.agent])
    codenames = [Perm.VIEW.codename, Perm.TRIAGE.codename]
    triager.user_permissions.add(*Permission.objects.filter(content_type__app_label="core", codename__in=codenames))
    client.force_login(triager)
    assert _correct(client, refund).status_code == 403 and not Correction.objects.exists()
    assert _correct(client, refund, make_pair="").status_code == 302
    assert Correction.objects.count() == 1 and not PreferencePair.objects.exists()


def test_another_agents_trajectory_is_not_found(client, make_user, refund):
    outsider = make_user(Role.REVIEWER, agents=[Agent.objects.create(name="other")])
    client.force_login(outsider)
    assert client.get(reverse("triage:review_correct", args=[refund.pk])).status_code == 404
    assert _correct(client, refund).status_code == 404
    assert client.post(reverse("triage:review_interventions", args=[refund.pk])).status_code == 404
    assert not (Correction.objects.exists() or PreferencePair.objects.exists())


def test_the_review_page_offers_pairs_from_interventions_and_the_button_makes_them(client, reviewer, refund):
    client.force_login(reviewer)
    review = client.get(reverse("triage:review", args=[refund.pk])).content.decode()
    assert "Preference pairs from the 1 human intervention" in review and "data-correct" in review
    response = client.post(reverse("triage:review_interventions", args=[refund.pk]))
    assert response.status_code == 302
    pair = PreferencePair.objects.get()
    assert pair.chosen == [{"role": "assistant", "content": "Supervisor: look the order up first."}]


def test_a_viewer_may_not_make_pairs_from_interventions(client, make_user, refund):
    client.force_login(make_user(Role.VIEWER, agents=[refund.agent]))
    assert client.post(reverse("triage:review_interventions", args=[refund.pk])).status_code == 403
    assert not PreferencePair.objects.exists()


def _lines(response) -> list[dict]:
    return [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]


def test_pairs_and_corrections_download_as_jsonl(client, reviewer, refund):
    client.force_login(reviewer)
    _correct(client, refund)
    pairs = client.get(reverse("datasets:pair_export") + "?split=train")
    assert pairs["Content-Disposition"] == 'attachment; filename="pairs_train.jsonl"'
    [line] = _lines(pairs)
    assert line["chosen"][0]["tool_calls"][0]["function"] == {"name": "lookup_order", "arguments": {"order_id": "17"}}
    assert line["prompt"] == [{"role": "user", "content": "Please refund order 17."}] and line["tools"]
    assert _lines(client.get(reverse("datasets:pair_export") + "?split=heldout")) == []
    [correction] = _lines(client.get(reverse("datasets:correction_export")))
    assert (correction["reviewer"], correction["step_index"], correction["pair"]["split"]) == ("rita", 1, "train")
    assert correction["original"]["tool_calls"][0]["function"]["name"] == "refund_order"


def test_the_api_gives_a_members_token_the_agents_pairs_and_an_outsider_a_404(client, make_user, reviewer, refund):
    client.force_login(reviewer)
    _correct(client, refund)
    client.logout()
    _, secret = api_token_create(user=reviewer, name="export", scopes=["read"])
    url = reverse("datasets:api_pairs", args=[refund.agent.name])
    [line] = _lines(client.get(url, HTTP_AUTHORIZATION=f"Bearer {secret}"))
    assert set(line) == {"id", "prompt", "chosen", "rejected", "tools"}
    corrections = client.get(reverse("datasets:api_corrections", args=[refund.agent.name]),
                             HTTP_AUTHORIZATION=f"Bearer {secret}")  # fmt: skip
    assert len(_lines(corrections)) == 1
    outsider = make_user(Role.REVIEWER, agents=[Agent.objects.create(name="other")])
    _, foreign = api_token_create(user=outsider, name="export", scopes=["read"])
    assert client.get(url, HTTP_AUTHORIZATION=f"Bearer {foreign}").status_code == 404
    _, ingest_only = api_token_create(user=reviewer, name="agent", scopes=["ingest"])
    assert client.get(url, HTTP_AUTHORIZATION=f"Bearer {ingest_only}").status_code == 403


def test_a_pair_snapshot_is_frozen_from_the_pairs_page_and_exports_as_pairs_train(client, reviewer, refund):
    client.force_login(reviewer)
    _correct(client, refund)
    response = client.post(reverse("datasets:pair_snapshot_new"),
                           {"name": "refund pairs", "split": "train", "agent": refund.agent.pk})  # fmt: skip
    snapshot = TaskSetSnapshot.objects.get(kind=SnapshotKind.PAIRS)
    assert response["Location"] == reverse("datasets:snapshot_detail", args=[snapshot.pk])
    assert "pairs_train.jsonl" in client.get(response["Location"]).content.decode()
    export = client.get(reverse("datasets:snapshot_export", args=[snapshot.pk, "native"]))
    assert export["Content-Disposition"] == 'attachment; filename="pairs_train.jsonl"'
    assert [line["id"] for line in _lines(export)] == [str(PreferencePair.objects.get().pk)]
    empty = client.post(reverse("datasets:pair_snapshot_new"),
                        {"name": "x", "split": "heldout", "agent": refund.agent.pk})  # fmt: skip
    assert empty.status_code == 400 and "no heldout preference pairs" in empty.content.decode()
