from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from flywheel.core.models import ApiToken, AuditEvent
from flywheel.core.roles import Role
from flywheel.core.services import api_token_create, api_token_revoke

pytestmark = pytest.mark.django_db


def bearer(secret: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def test_a_token_authenticates_as_its_user_with_their_roles(client, make_user):
    user = make_user(Role.REVIEWER)
    _, secret = api_token_create(user=user, name="ingest")
    response = client.get(reverse("core:api_me"), **bearer(secret))
    assert response.status_code == 200
    assert response.json()["username"] == user.username
    assert "core.ingest_trajectories" in response.json()["permissions"]


def test_only_the_hash_is_stored(make_user):
    token, secret = api_token_create(user=make_user(Role.VIEWER), name="x")
    stored = ApiToken.objects.filter(pk=token.pk).values().get()
    assert secret not in str(stored)
    assert secret.startswith(stored["prefix"])


def test_a_revoked_token_gets_401(client, make_user):
    token, secret = api_token_create(user=make_user(Role.VIEWER), name="x")
    api_token_revoke(actor=None, token=token)
    response = client.get(reverse("core:api_me"), **bearer(secret))
    assert response.status_code == 401
    assert "revoked" in response.json()["error"]


def test_an_unknown_token_gets_401(client):
    response = client.get(reverse("core:api_me"), **bearer("fwk_not-a-real-token"))
    assert response.status_code == 401


def test_a_token_of_a_user_without_the_permission_gets_403(client, make_user):
    _, secret = api_token_create(user=make_user(None), name="x")
    response = client.get(reverse("core:api_me"), **bearer(secret))
    assert response.status_code == 403


def test_a_token_of_a_deactivated_user_gets_401(client, make_user):
    user = make_user(Role.VIEWER)
    _, secret = api_token_create(user=user, name="x")
    user.is_active = False
    user.save()
    assert client.get(reverse("core:api_me"), **bearer(secret)).status_code == 401


def test_use_is_recorded_at_most_once_a_minute(client, make_user):
    token, secret = api_token_create(user=make_user(Role.VIEWER), name="x")
    client.get(reverse("core:api_me"), **bearer(secret))
    token.refresh_from_db()
    first_use = token.last_used_at
    assert first_use is not None
    client.get(reverse("core:api_me"), **bearer(secret))
    token.refresh_from_db()
    assert token.last_used_at == first_use
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now() - timedelta(minutes=5))
    client.get(reverse("core:api_me"), **bearer(secret))
    token.refresh_from_db()
    assert token.last_used_at > first_use


def test_the_account_page_creates_a_token_and_shows_the_secret_once(client, make_user):
    user = make_user(Role.VIEWER)
    client.force_login(user)
    response = client.post(reverse("core:token_list"), {"name": "laptop"})
    token = ApiToken.objects.get(user=user)
    secret = response.context["new_secret"]
    assert secret.startswith(token.prefix)
    assert secret not in client.get(reverse("core:token_list")).content.decode()
    assert AuditEvent.objects.filter(action="api_token.create", target_id=str(token.pk)).exists()


def test_a_user_can_revoke_their_own_token_but_not_someone_elses(client, make_user):
    owner, outsider = make_user(Role.VIEWER), make_user(Role.VIEWER)
    token, _ = api_token_create(user=owner, name="x")
    client.force_login(outsider)
    assert client.post(reverse("core:token_revoke", args=[token.pk])).status_code == 404
    client.force_login(owner)
    assert client.post(reverse("core:token_revoke", args=[token.pk])).status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_an_api_call_with_a_session_must_pass_csrf(make_user):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user(Role.VIEWER))
    # api_me is GET-only; a POST still passes through the CSRF check before the method check.
    assert client.post(reverse("core:api_me")).status_code == 403
