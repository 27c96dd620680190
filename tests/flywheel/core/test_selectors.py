"""Per-agent access: who sees which agent's rows (`flywheel.core.selectors`)."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps as django_apps
from django.contrib.auth.models import Group
from django.http import Http404
from django.urls import reverse

from flywheel.core.access import agent_get_or_404
from flywheel.core.models import Agent, AuditEvent
from flywheel.core.roles import Role
from flywheel.core.selectors import (
    agent_get,
    agents_filter,
    audit_event_list,
    choices_limit,
    ingest_refusal,
    sees_all_agents,
    visible_agents,
)
from flywheel.core.services import agent_create, audit_record
from flywheel.datasets.forms import SnapshotForm
from flywheel.datasets.models import RegressionTask, SourceKind


@pytest.fixture
def agents(db) -> tuple[Agent, Agent]:
    return agent_create(actor=None, name="alpha"), agent_create(actor=None, name="bravo")


def _task(agent: Agent | None, key: str) -> RegressionTask:
    return RegressionTask.objects.create(external_id=key, split="train", source_kind=SourceKind.MANUAL, agent=agent,
                                         content={"messages": []}, content_hash=key, leakage_key=key)  # fmt: skip


def _visible_tasks(user) -> set[str]:
    return set(RegressionTask.objects.filter(agents_filter(user)).values_list("external_id", flat=True))


@pytest.mark.django_db
def test_a_member_sees_their_agents_rows_and_not_anothers_nor_those_of_no_agent(make_user, agents):
    alpha, bravo = agents
    _task(alpha, "a"), _task(bravo, "b"), _task(None, "none")
    member = make_user(Role.VIEWER, agents=[alpha])
    assert _visible_tasks(member) == {"a"}
    assert list(visible_agents(member)) == [alpha]
    assert agent_get(viewer=member, name="bravo") is None and agent_get(viewer=member, name="alpha") == alpha


@pytest.mark.django_db
def test_an_agent_another_member_owns_is_not_found_alike_with_one_that_does_not_exist(make_user, agents):
    alpha, _ = agents
    member = make_user(Role.VIEWER, agents=[alpha])
    assert agent_get_or_404(viewer=member, name="alpha") == alpha
    with pytest.raises(Http404) as foreign:
        agent_get_or_404(viewer=member, name="bravo")
    with pytest.raises(Http404) as missing:
        agent_get_or_404(viewer=member, name="charlie")
    assert str(foreign.value) == str(missing.value) == "no such agent"


@pytest.mark.django_db
def test_a_team_makes_every_user_in_it_a_member(make_user, agents):
    alpha, _ = agents
    _task(alpha, "a")
    team = Group.objects.create(name="alpha-team")
    alpha.teams.add(team)
    user = make_user(Role.VIEWER, agents=[])
    assert _visible_tasks(user) == set()
    user.groups.add(team)
    assert _visible_tasks(user) == {"a"}


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["all-agents grant", "admin role", "superuser"])
def test_operators_admins_and_superusers_see_every_row_including_those_of_no_agent(make_user, agents, who):
    _task(agents[0], "a"), _task(agents[1], "b"), _task(None, "none")
    if who == "admin role":
        user = make_user(Role.ADMIN, agents=[])
    else:
        user = make_user(Role.VIEWER, agents="all" if who == "all-agents grant" else [])
        user.is_superuser = who == "superuser"
        user.save()
    assert sees_all_agents(user)
    assert _visible_tasks(user) == {"a", "b", "none"}


@pytest.mark.django_db
def test_a_user_with_no_membership_sees_nothing(make_user, agents):
    _task(agents[0], "a")
    assert _visible_tasks(make_user(Role.VIEWER, agents=[])) == set()


@pytest.mark.django_db
def test_ingest_is_refused_into_an_agent_that_is_not_the_users_or_does_not_exist(make_user, agents):
    member = make_user(Role.REVIEWER, agents=[agents[0]])
    assert ingest_refusal(user=member, agent_name="alpha") is None
    foreign, unknown = (
        ingest_refusal(user=member, agent_name="bravo"),
        ingest_refusal(user=member, agent_name="new-one"),
    )
    assert foreign is not None and unknown is not None
    assert foreign.replace("bravo", "?") == unknown.replace("new-one", "?")  # tells nothing of which exists
    assert ingest_refusal(user=make_user(Role.REVIEWER), agent_name="new-one") is None


@pytest.mark.django_db
def test_form_choices_list_only_the_users_agents(make_user, agents):
    form = choices_limit(SnapshotForm(), viewer=make_user(Role.REVIEWER, agents=[agents[0]]))
    assert list(form.fields["agent"].queryset) == [agents[0]]
    bound = choices_limit(SnapshotForm({"name": "x", "split": "train", "agent": agents[1].pk, "stratify_by": "category",
                                        "seed": 0}), viewer=make_user(Role.REVIEWER, agents=[agents[0]]))  # fmt: skip
    assert not bound.is_valid() and "agent" in bound.errors


@pytest.mark.django_db
def test_the_migration_grants_every_existing_user_all_agents(make_user, agents):
    user = make_user(Role.VIEWER, agents=[])
    assert not sees_all_agents(user)
    migration = importlib.import_module("flywheel.core.migrations.0003_agent_members")
    migration.grant_existing_users_all_agents(django_apps, None)
    assert sees_all_agents(type(user).objects.get(pk=user.pk))


NO_PRICES = {"price_input_per_million": "0", "price_output_per_million": "0"}


@pytest.mark.django_db
def test_the_agent_admin_adds_members(client, make_user, agents):
    admin = make_user(Role.ADMIN)
    admin.is_staff = admin.is_superuser = True
    admin.save()
    viewer = make_user(Role.VIEWER, agents=[])
    client.force_login(admin)
    alpha = agents[0]
    data = {"name": "alpha", "description": "", "tools": "[]", "tools_source": "uploaded", "members": [viewer.pk],
            "record_served": "on", "served_sample_rate": "1.0", **NO_PRICES}  # fmt: skip
    response = client.post(reverse("admin:core_agent_change", args=[alpha.pk]), data)
    assert response.status_code == 302, response.content[:500]
    assert list(visible_agents(viewer)) == [alpha]


@pytest.mark.django_db
def test_an_auditor_without_the_all_agents_grant_reads_only_their_own_actions(make_user, agents):
    auditor = make_user(Role.APPROVER, agents=[agents[0]])
    audit_record(actor=auditor, action="version.promote")
    audit_record(actor=None, action="version.register", target=agents[1])
    assert [event.action for event in audit_event_list(viewer=auditor)] == ["version.promote"]
    everything = {event.action for event in audit_event_list(viewer=make_user(Role.APPROVER))}
    assert {"version.promote", "version.register", "agent.create"} <= everything


@pytest.mark.django_db
def test_the_agent_admin_sets_served_recording_with_an_audit_row(client, make_user, agents):
    admin = make_user(Role.ADMIN)
    admin.is_staff = admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    alpha = agents[0]
    data = {"name": "alpha", "description": "", "tools": "[]", "tools_source": "uploaded", "served_sample_rate": "0.25",
            **NO_PRICES}  # fmt: skip
    response = client.post(reverse("admin:core_agent_change", args=[alpha.pk]), data)
    assert response.status_code == 302, response.content[:500]
    alpha.refresh_from_db()
    assert (alpha.record_served, alpha.served_sample_rate) == (False, 0.25)
    event = AuditEvent.objects.get(action="agent.served_recording")
    assert event.data == {"enabled": False, "sample_rate": 0.25}
    data["served_sample_rate"] = "1.5"
    assert client.post(reverse("admin:core_agent_change", args=[alpha.pk]), data).status_code == 200  # refused


@pytest.mark.django_db
def test_the_agent_admin_sets_token_prices_with_an_audit_row(client, make_user, agents):
    admin = make_user(Role.ADMIN)
    admin.is_staff = admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    alpha = agents[0]
    assert (alpha.price_input_per_million, alpha.price_output_per_million) == (0.0, 0.0)  # local models: free
    data = {"name": "alpha", "description": "", "tools": "[]", "tools_source": "uploaded", "record_served": "on",
            "served_sample_rate": "1.0", "price_input_per_million": "2.5",
            "price_output_per_million": "10"}  # fmt: skip
    response = client.post(reverse("admin:core_agent_change", args=[alpha.pk]), data)
    assert response.status_code == 302, response.content[:500]
    alpha.refresh_from_db()
    assert (alpha.price_input_per_million, alpha.price_output_per_million) == (2.5, 10.0)
    assert AuditEvent.objects.get(action="agent.prices").data == {"input_per_million": 2.5, "output_per_million": 10.0}
    data["price_output_per_million"] = "-1"
    assert client.post(reverse("admin:core_agent_change", args=[alpha.pk]), data).status_code == 200  # refused
    alpha.refresh_from_db()
    assert alpha.price_output_per_million == 10.0
