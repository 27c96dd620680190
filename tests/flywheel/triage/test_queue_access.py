"""Queues and per-agent access: who edits a queue, and what of it each viewer sees."""

from __future__ import annotations

import io
import json

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.core.services import agent_create
from flywheel.ingest.models import Trajectory
from flywheel.ingest.services import IngestOptions, stream_ingest
from flywheel.triage import selectors, services
from flywheel.triage.models import Queue, QueueItem


def _store(*agents: str) -> dict[str, Trajectory]:
    """One failed trajectory per agent, by agent name."""
    lines = [json.dumps({"id": f"{name}-run", "agent": name, "outcome": "failure",
                         "steps": [{"kind": "user", "text": "help"}]}) for name in agents]  # fmt: skip
    stream_ingest(stream=io.BytesIO("\n".join(lines).encode()), options=IngestOptions(format="native"))
    return {t.agent.name: t for t in Trajectory.objects.select_related("agent")}


@pytest.fixture
def owner(make_user):
    return make_user(Role.REVIEWER)


@pytest.fixture
def queue(owner, db) -> Queue:
    return services.queue_create(actor=owner, name="by hand", filters=selectors.TriageFilters(), reviewers=[owner])


@pytest.mark.django_db
def test_a_reviewer_cannot_add_themselves_to_a_queue_they_were_not_given(client, make_user, queue):
    stranger = make_user(Role.REVIEWER)
    client.force_login(stranger)
    data = {"name": queue.name, "outcome": "failure", "reviewers": [stranger.pk]}
    assert client.get(reverse("triage:queue_edit", args=[queue.pk])).status_code == 403
    assert client.post(reverse("triage:queue_edit", args=[queue.pk]), data).status_code == 403
    assert list(queue.reviewers.all()) != [stranger] and stranger not in queue.reviewers.all()


@pytest.mark.django_db
@pytest.mark.parametrize("editor", ["owner", "admin"])
def test_the_owner_or_an_admin_edits_a_queue(client, make_user, owner, queue, editor):
    newcomer = make_user(Role.REVIEWER)
    client.force_login(owner if editor == "owner" else make_user(Role.ADMIN))
    response = client.post(
        reverse("triage:queue_edit", args=[queue.pk]),
        {"name": queue.name, "outcome": "failure", "reviewers": [newcomer.pk]},
    )
    assert response.status_code == 302
    assert list(queue.reviewers.all()) == [newcomer]


@pytest.mark.django_db
def test_a_reviewer_cannot_add_trajectories_to_a_queue_that_is_not_theirs(client, make_user, queue):
    trajectory = _store("alpha")["alpha"]
    client.force_login(make_user(Role.REVIEWER))
    data = {"action": "add_to_queue", "scope": "selected", "ids": [trajectory.pk], "target_queue": queue.pk}
    assert client.post(reverse("triage:bulk"), data).status_code == 403
    assert not QueueItem.objects.filter(queue=queue).exists()


@pytest.mark.django_db
def test_a_queue_shows_and_hands_out_only_the_viewers_agents_trajectories(make_user, owner, queue):
    stored = _store("alpha", "bravo")
    services.queue_items_add(actor=owner, queue=queue, trajectory_ids=[t.pk for t in stored.values()])
    bravo_member = make_user(Role.REVIEWER, agents=[Trajectory.objects.get(pk=stored["bravo"].pk).agent])
    queue.reviewers.add(bravo_member)
    assert set(selectors.queue_members(queue, viewer=owner)) == set(stored.values())
    assert list(selectors.queue_members(queue, viewer=bravo_member)) == [stored["bravo"]]
    assert selectors.queue_progress(queue, viewer=bravo_member).total == 1
    assert services.queue_next(queue=queue, reviewer=bravo_member) == stored["bravo"]
    assert services.queue_next(queue=queue, reviewer=bravo_member) == stored["bravo"]  # its own claim, again


@pytest.mark.django_db
def test_a_queue_filtered_on_another_agent_is_not_found(client, make_user, owner):
    _store("alpha")
    alpha_queue = services.queue_create(
        actor=owner, name="alpha failures",
        filters=selectors.TriageFilters(base=selectors.TrajectoryFilters(agent="alpha")),
    )  # fmt: skip
    outsider = make_user(Role.REVIEWER, agents=[agent_create(actor=None, name="bravo")])
    client.force_login(outsider)
    assert client.get(reverse("triage:queue_detail", args=[alpha_queue.pk])).status_code == 404
    assert "alpha failures" not in client.get(reverse("triage:queue")).content.decode()


@pytest.mark.django_db
def test_the_queue_page_offers_edit_to_its_owner_only(client, make_user, owner, queue):
    edit = reverse("triage:queue_edit", args=[queue.pk])
    pages = {}
    for user in (owner, make_user(Role.REVIEWER)):
        client.force_login(user)
        pages[user] = client.get(reverse("triage:queue_detail", args=[queue.pk])).content.decode()
    assert [edit in page for page in pages.values()] == [True, False]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("who", "status"),
    [("queue reviewer", 302), ("owner", 302), ("admin", 302), ("other reviewer", 403), ("viewer", 403)],
)
def test_the_queues_reviewers_its_owner_or_an_admin_remove_an_item_and_nobody_else(
    client, make_user, owner, queue, who, status
):
    """`queue` is given to its owner only, so another reviewer neither works nor edits it."""
    trajectory = _store("alpha")["alpha"]
    services.queue_items_add(actor=owner, queue=queue, trajectory_ids=[trajectory.pk])
    queue_reviewer = make_user(Role.REVIEWER)
    queue.reviewers.add(queue_reviewer)
    users = {"queue reviewer": queue_reviewer, "owner": owner, "admin": make_user(Role.ADMIN),
             "other reviewer": make_user(Role.REVIEWER), "viewer": make_user(Role.VIEWER)}  # fmt: skip
    client.force_login(users[who])
    response = client.post(reverse("triage:queue_item_remove", args=[queue.pk, trajectory.pk]))
    assert response.status_code == status
    assert (QueueItem.objects.get(queue=queue).removed_at is not None) == (status == 302)


@pytest.mark.django_db
def test_an_outsider_cannot_remove_another_agents_trajectory_from_an_open_queue(client, make_user, owner):
    stored = _store("alpha")
    open_queue = services.queue_create(actor=owner, name="open", filters=selectors.TriageFilters())
    services.queue_items_add(actor=owner, queue=open_queue, trajectory_ids=[stored["alpha"].pk])
    outsider = make_user(Role.REVIEWER, agents=[agent_create(actor=None, name="bravo")])
    client.force_login(outsider)
    response = client.post(reverse("triage:queue_item_remove", args=[open_queue.pk, stored["alpha"].pk]))
    assert response.status_code == 404
    assert QueueItem.objects.get(queue=open_queue).removed_at is None
