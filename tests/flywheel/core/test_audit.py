from __future__ import annotations

import pytest
from django.urls import reverse

from flywheel.core.models import AuditEvent
from flywheel.core.roles import Role
from flywheel.core.services import agent_create, audit_record

pytestmark = pytest.mark.django_db


def test_it_records_actor_action_target_and_data(make_user):
    actor = make_user(Role.ADMIN)
    agent = agent_create(actor=actor, name="support-bot")
    event = audit_record(actor=actor, action="agent.inspect", target=agent, data={"why": "test"})
    assert (event.actor_name, event.target_type, event.target_id) == (actor.username, "core.Agent", str(agent.pk))
    assert event.data == {"why": "test"}


def test_a_record_survives_the_deletion_of_its_actor(make_user):
    actor = make_user(Role.ADMIN)
    event = audit_record(actor=actor, action="something.happened")
    actor.delete()
    event.refresh_from_db()
    assert event.actor is None and event.actor_name.startswith("admin-")


def test_the_audit_page_lists_and_filters_events(client, make_user):
    approver = make_user(Role.APPROVER)
    audit_record(actor=approver, action="version.promote", data={"version": 3})
    audit_record(actor=None, action="job.fail")
    client.force_login(approver)
    page = client.get(reverse("core:audit_list"), {"action": "version."}).content.decode()
    assert "<code>version.promote</code>" in page and "<code>job.fail</code>" not in page
    assert "<code>job.fail</code>" in client.get(reverse("core:audit_list")).content.decode()


def test_stored_text_is_escaped_on_the_page(client, make_user):
    admin = make_user(Role.ADMIN)
    audit_record(actor=admin, action="agent.note", data={"note": "<script>alert(1)</script>"})
    client.force_login(admin)
    page = client.get(reverse("core:audit_list")).content.decode()
    assert "<script>alert(1)</script>" not in page
    assert AuditEvent.objects.count() == 1
