"""End users' feedback on a trajectory: `POST /api/v1/trajectories/<id>/feedback` and by external id.

Stored as rows (several per trajectory), refused with a 400 that says why, 404 for a trajectory
of an agent the caller is no member of; shown in the trace viewer and filterable in the lists.
"""

from __future__ import annotations

import io
import json

import pytest
from django.urls import reverse

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.core.services import agent_create, api_token_create
from flywheel.ingest.models import Feedback, Trajectory
from flywheel.ingest.services import IngestOptions, stream_ingest

pytestmark = pytest.mark.django_db


def _trajectory(agent: str, external_id: str) -> Trajectory:
    record = {"id": external_id, "agent": agent, "steps": [{"kind": "user", "text": f"hello from {external_id}"}]}
    stream_ingest(stream=io.BytesIO(json.dumps(record).encode()), options=IngestOptions(format="native"))
    return Trajectory.objects.get(agent__name=agent, external_id=external_id)


@pytest.fixture
def support(db) -> Agent:
    return agent_create(actor=None, name="support-bot")


@pytest.fixture
def trajectory(support) -> Trajectory:
    return _trajectory("support-bot", "chatcmpl-1")


@pytest.fixture
def member(make_user, support):
    return make_user(Role.REVIEWER, agents=[support])


def post(client, user, url: str, body: object) -> object:
    token = api_token_create(user=user, name="product")[1]
    return client.post(url, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


def by_id(trajectory: Trajectory) -> str:
    return reverse("ingest:api_feedback", args=[trajectory.pk])


def by_external_id(external_id: str, query: str = "") -> str:
    return reverse("ingest:api_feedback_by_external_id", args=[external_id]) + query


def test_feedback_is_stored_by_id_and_by_external_id_several_per_trajectory(client, member, trajectory):
    first = post(client, member, by_id(trajectory), {"value": "down", "comment": "wrong order", "user_id": "u-7"})
    assert first.status_code == 201, first.content
    assert first.json()["value"] == "down" and first.json()["trajectory"] == str(trajectory.pk)
    second = post(client, member, by_external_id("chatcmpl-1", "?agent=support-bot"), {"value": 0.25})
    assert second.status_code == 201, second.content
    rows = list(Feedback.objects.filter(trajectory=trajectory).values_list("thumb", "score", "comment", "end_user"))
    assert rows == [("down", None, "wrong order", "u-7"), ("", 0.25, "", "")]
    assert Feedback.objects.get(score=0.25).sent_by == member


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"value": "meh"}, "value must be"),
        ({}, "value must be"),
        ({"value": True}, "value must be"),
        ({"value": [1]}, "value must be"),
        ({"value": "up", "comment": 3}, "comment must be a string"),
        ({"value": "up", "user_id": {"id": 1}}, "user_id must be a string"),
        (["up"], "object"),
    ],
)
def test_bad_feedback_is_refused_with_a_400_that_says_why(client, member, trajectory, body, reason):
    response = post(client, member, by_id(trajectory), body)
    assert response.status_code == 400 and reason in response.json()["error"]
    assert not Feedback.objects.exists()


def test_a_non_finite_score_is_refused(client, member, trajectory):
    token = api_token_create(user=member, name="product")[1]
    response = client.post(by_id(trajectory), '{"value": NaN}', content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {token}")  # fmt: skip
    assert response.status_code == 400 and not Feedback.objects.exists()


def test_another_agents_trajectory_is_404_by_id_and_by_external_id(client, make_user, trajectory):
    outsider = make_user(Role.REVIEWER, agents=[agent_create(actor=None, name="billing-bot")])
    for url in (by_id(trajectory), by_external_id("chatcmpl-1"), by_external_id("chatcmpl-1", "?agent=support-bot")):
        assert post(client, outsider, url, {"value": "up"}).status_code == 404
    assert not Feedback.objects.exists()


def test_without_the_ingest_permission_or_scope_feedback_is_refused(client, make_user, support, trajectory):
    viewer = make_user(Role.VIEWER, agents=[support])
    assert post(client, viewer, by_id(trajectory), {"value": "up"}).status_code == 403
    read_only = api_token_create(user=make_user(Role.REVIEWER, agents=[support]), name="ro", scopes=["read"])[1]
    response = client.post(by_id(trajectory), '{"value": "up"}', content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {read_only}")  # fmt: skip
    assert response.status_code == 403 and "scope" in response.json()["error"]
    assert client.post(by_id(trajectory), '{"value": "up"}', content_type="application/json").status_code == 401
    assert not Feedback.objects.exists()


def test_an_external_id_two_agents_share_needs_the_agent(client, make_user, support, trajectory):
    other = agent_create(actor=None, name="billing-bot")
    _trajectory("billing-bot", "chatcmpl-1")
    both = make_user(Role.REVIEWER, agents=[support, other])
    assert post(client, both, by_external_id("chatcmpl-1"), {"value": "up"}).status_code == 409
    assert post(client, both, by_external_id("chatcmpl-1", "?agent=billing-bot"), {"value": "up"}).status_code == 201
    assert Feedback.objects.get().trajectory.agent == other


def test_feedback_shows_in_the_trace_viewer(client, member, trajectory):
    post(client, member, by_id(trajectory), {"value": "down", "comment": "it sent the wrong order", "user_id": "u-7"})
    client.force_login(member)
    page = client.get(reverse("ingest:trajectory_detail", args=[trajectory.pk])).content.decode()
    assert "User feedback" in page and "Thumbs down" in page and "it sent the wrong order" in page and "u-7" in page


@pytest.mark.parametrize("url_name", ["ingest:trajectory_list", "triage:trajectory_list"])
def test_the_lists_filter_by_feedback(client, member, trajectory, url_name):
    liked, unrated = _trajectory("support-bot", "chatcmpl-2"), _trajectory("support-bot", "chatcmpl-3")
    post(client, member, by_id(trajectory), {"value": "down"})
    post(client, member, by_id(liked), {"value": "up"})
    client.force_login(member)

    def shown(feedback: str) -> set[str]:
        page = client.get(reverse(url_name), {"feedback": feedback}).content.decode()
        return {t.external_id for t in (trajectory, liked, unrated) if f"hello from {t.external_id}" in page
                or str(t.pk) in page}  # fmt: skip

    assert shown("") == {"chatcmpl-1", "chatcmpl-2", "chatcmpl-3"}
    assert shown("down") == {"chatcmpl-1"}
    assert shown("up") == {"chatcmpl-2"}
    assert shown("any") == {"chatcmpl-1", "chatcmpl-2"}
