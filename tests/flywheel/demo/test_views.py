"""The home page's "Run the demo loop" button: admins only, and only once the demo users exist."""

from __future__ import annotations

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.demo import views as demo_views
from flywheel.demo.services import DEMO_APPROVER, DEMO_TRAINER


@pytest.mark.django_db
def test_the_home_button_queues_the_loop_for_an_admin_once_the_demo_users_exist(client, make_user, monkeypatch):
    queued = []
    monkeypatch.setattr(demo_views.demo_advance_task, "delay", lambda: queued.append("advance"))
    client.force_login(make_user(Role.ADMIN))
    assert "Run the demo loop" in client.get(reverse("dashboards:home")).content.decode()

    missing = client.post(reverse("demo:loop_start"), follow=True)
    assert "demo users are missing" in missing.content.decode() and queued == []

    make_user(Role.TRAINER, username=DEMO_TRAINER), make_user(Role.APPROVER, username=DEMO_APPROVER)
    response = client.post(reverse("demo:loop_start"))
    assert response.status_code == 302 and response["Location"] == reverse("training:job_list")
    assert queued == ["advance"]


def test_a_viewer_sees_no_demo_button(client, make_user, db):
    client.force_login(make_user(Role.VIEWER))
    assert "Run the demo loop" not in client.get(reverse("dashboards:home")).content.decode()
