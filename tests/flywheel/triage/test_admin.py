"""The admin manages custom buckets and agents' policies through the services; built-in buckets stay."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from flywheel.core.models import Agent, AuditEvent
from flywheel.core.roles import Role
from flywheel.triage import services
from flywheel.triage.models import AgentPolicy, Bucket

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, make_user):
    user = make_user(Role.ADMIN)
    user.is_staff = user.is_superuser = True
    user.save()
    client.force_login(user)
    return client


def test_an_admin_adds_a_custom_bucket_and_it_is_audited(admin_client):
    data = {"name": "Rude reply", "description": "Tone.", "colour": "#0ca678", "position": 50}
    response = admin_client.post(reverse("admin:triage_bucket_add"), data)
    assert response.status_code == 302
    bucket = Bucket.objects.get(slug="rude_reply")
    assert (bucket.built_in, bucket.position) == (False, 50)
    assert AuditEvent.objects.filter(action="bucket.create", target_id=str(bucket.pk)).exists()


def test_a_built_in_bucket_has_no_delete_in_the_admin(admin_client):
    bucket = Bucket.objects.get(slug="format_error")
    response = admin_client.post(reverse("admin:triage_bucket_delete", args=[bucket.pk]), {"post": "yes"})
    assert response.status_code == 403
    assert Bucket.objects.filter(slug="format_error").exists()


def bulk_delete(admin_client, *buckets: Bucket):
    data = {"action": "delete_selected", "_selected_action": [b.pk for b in buckets], "post": "yes"}
    return admin_client.post(reverse("admin:triage_bucket_changelist"), data)


def test_bulk_deleting_with_a_built_in_bucket_selected_deletes_nothing(admin_client):
    custom = Bucket.objects.create(slug="tmp", name="Temporary")
    assert bulk_delete(admin_client, custom, Bucket.objects.get(slug="wrong_tool")).status_code == 403
    assert Bucket.objects.filter(slug="tmp").exists() and Bucket.objects.filter(built_in=True).count() == 7


def test_bulk_deleting_custom_buckets_goes_through_the_service(admin_client):
    custom = Bucket.objects.create(slug="tmp", name="Temporary")
    assert bulk_delete(admin_client, custom).status_code == 302
    assert not Bucket.objects.filter(slug="tmp").exists()
    assert AuditEvent.objects.filter(action="bucket.delete", target_id=str(custom.pk)).exists()


def test_an_invalid_policy_is_refused_in_the_admin_form(admin_client):
    agent = Agent.objects.create(name="shop")
    policy = json.dumps({"argument_patterns": [{"id": "x", "pattern": "("}]})
    response = admin_client.post(reverse("admin:triage_agentpolicy_add"), {"agent": agent.pk, "policy": policy})
    assert response.status_code == 200 and b"missing )" in response.content
    assert not AgentPolicy.objects.exists()


def test_a_valid_policy_is_stored_through_the_service(admin_client, monkeypatch):
    monkeypatch.setattr("flywheel.triage.tasks.recompute_agent_suggestions.delay_on_commit", lambda agent_id: None)
    agent = Agent.objects.create(name="shop")
    policy = {"name": "strict", "denied_tools": ["refund_*"]}
    response = admin_client.post(
        reverse("admin:triage_agentpolicy_add"), {"agent": agent.pk, "policy": json.dumps(policy)}
    )
    assert response.status_code == 302
    assert AgentPolicy.objects.get(agent=agent).policy == policy
    assert AuditEvent.objects.filter(action="agent_policy.set").exists()


GUARDED_POLICY = {"name": "strict", "denied_tools": ["refund_*"],
                  "argument_patterns": [{"id": "sql-drop", "pattern": "drop table"}]}  # fmt: skip


def test_guardrails_are_set_with_the_policy_and_audited(admin_client, monkeypatch):
    monkeypatch.setattr("flywheel.triage.tasks.recompute_agent_suggestions.delay_on_commit", lambda agent_id: None)
    agent = Agent.objects.create(name="shop")
    guardrails = {"default": "flag", "rules": {"denied-tool": "block", "sql-drop": "off"}}
    response = admin_client.post(reverse("admin:triage_agentpolicy_add"), {
        "agent": agent.pk, "policy": json.dumps(GUARDED_POLICY), "guardrails": json.dumps(guardrails)})  # fmt: skip
    assert response.status_code == 302, response.content[:500]
    assert AgentPolicy.objects.get(agent=agent).guardrails == guardrails
    assert AuditEvent.objects.get(action="agent_policy.set").data["guardrails"] == guardrails


@pytest.mark.parametrize(
    ("guardrails", "message"),
    [
        ({"rules": {"sql-drp": "block"}}, b"not in the safety policy"),  # a typo would let the call through
        ({"default": "deny"}, b"is not one of block, flag, off"),
        ({"rules": {"denied-tool": "stop"}}, b"is not one of block, flag, off"),
        ([], b"guardrails are an object"),
    ],
    ids=["unknown rule", "bad default", "bad action", "not an object"],
)
def test_guardrails_naming_what_the_policy_lacks_are_refused(admin_client, guardrails, message):
    agent = Agent.objects.create(name="shop")
    response = admin_client.post(reverse("admin:triage_agentpolicy_add"), {
        "agent": agent.pk, "policy": json.dumps(GUARDED_POLICY), "guardrails": json.dumps(guardrails)})  # fmt: skip
    assert response.status_code == 200 and message in response.content.replace(b"&#x27;", b"'")
    assert not AgentPolicy.objects.exists()


def test_a_staff_user_without_the_policy_permission_cannot_set_guardrails(client, make_user):
    agent = Agent.objects.create(name="shop")
    staff = make_user(Role.APPROVER)
    staff.is_staff = True
    staff.save()
    client.force_login(staff)
    data = {"agent": agent.pk, "policy": json.dumps(GUARDED_POLICY), "guardrails": json.dumps({"default": "off"})}
    assert client.post(reverse("admin:triage_agentpolicy_add"), data).status_code == 403
    assert client.get(reverse("admin:triage_agentpolicy_changelist")).status_code == 403
    assert not AgentPolicy.objects.exists()


def test_a_policy_change_that_drops_a_guarded_rule_is_refused(make_user, monkeypatch):
    monkeypatch.setattr("flywheel.triage.tasks.recompute_agent_suggestions.delay_on_commit", lambda agent_id: None)
    agent = Agent.objects.create(name="shop")
    admin = make_user(Role.ADMIN)
    guardrails = {"rules": {"sql-drop": "block"}}
    services.agent_policy_set(actor=admin, agent=agent, policy=GUARDED_POLICY, guardrails=guardrails)
    with pytest.raises(ValidationError, match="sql-drop"):
        services.agent_policy_set(actor=admin, agent=agent, policy={"name": "lax"})
    assert AgentPolicy.objects.get(agent=agent).policy == GUARDED_POLICY
