"""API tokens: bearer authentication, scopes, expiry, and revocation by hand, by a password change or deactivation."""

from __future__ import annotations

import importlib
import io
from datetime import timedelta

import pytest
from django.apps import apps as django_apps
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.management import call_command
from django.urls import URLResolver, get_resolver, reverse
from django.utils import timezone

from flywheel.core.access import permission_required
from flywheel.core.models import ApiToken, AuditEvent
from flywheel.core.roles import Perm, Role
from flywheel.core.services import api_token_create, api_token_revoke
from tests.conftest import PASSWORD

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
    response = client.post(reverse("core:token_list"), {"name": "laptop", "scopes": ["read"], "expires_in_days": "90"})
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


def test_an_expired_token_gets_401_token_expired(client, make_user):
    token, secret = api_token_create(
        user=make_user(Role.VIEWER), name="x", expires_at=timezone.now() + timedelta(days=1)
    )
    assert client.get(reverse("core:api_me"), **bearer(secret)).status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = client.get(reverse("core:api_me"), **bearer(secret))
    assert response.status_code == 401
    assert response.json()["error"] == "token expired"


def test_a_token_cannot_be_made_already_expired(make_user):
    with pytest.raises(ValidationError, match="future"):
        api_token_create(user=make_user(Role.VIEWER), name="x", expires_at=timezone.now() - timedelta(minutes=1))
    assert not ApiToken.objects.exists()


def test_a_token_with_an_unknown_scope_is_refused(make_user):
    with pytest.raises(ValidationError, match="admin"):
        api_token_create(user=make_user(Role.VIEWER), name="x", scopes=["read", "admin"])
    assert not ApiToken.objects.exists()


def test_a_token_without_the_endpoints_scope_gets_403_naming_it(client, make_user):
    reviewer = make_user(Role.REVIEWER)
    _, read_only = api_token_create(user=reviewer, name="dashboards", scopes=["read"])
    _, ingest_only = api_token_create(user=reviewer, name="agent", scopes=["ingest"])
    ingest_url = reverse("ingest:api_trajectories") + "?agent=support-bot"

    refused = client.post(ingest_url, "[]", content_type="application/json", **bearer(read_only))
    assert refused.status_code == 403
    assert "'ingest' scope" in refused.json()["error"]
    assert client.get(reverse("core:api_me"), **bearer(read_only)).status_code == 200

    refused = client.get(reverse("core:api_me"), **bearer(ingest_only))
    assert refused.status_code == 403
    assert "'read' scope" in refused.json()["error"]
    assert client.post(ingest_url, "[]", content_type="application/json", **bearer(ingest_only)).status_code != 403


def test_a_train_scope_is_needed_to_launch_jobs(client, make_user):
    _, secret = api_token_create(user=make_user(Role.TRAINER), name="ci", scopes=["read", "ingest"])
    response = client.post(reverse("training:api_jobs"), "{}", content_type="application/json", **bearer(secret))
    assert response.status_code == 403
    assert "'train' scope" in response.json()["error"]


def test_every_api_endpoint_names_the_scope_it_needs():
    scopes = {}
    for pattern in _patterns(get_resolver().url_patterns):
        if getattr(pattern.callback, "is_api", False):
            scopes[pattern.name] = pattern.callback.required_scope
    assert scopes == {
        "api_trajectories": "ingest",
        "api_feedback": "ingest",
        "api_feedback_by_external_id": "ingest",
        "otlp_traces": "ingest",
        "otlp_logs": "ingest",
        "api_me": "read",
        "api_live": "read",
        "chat_completions": "read",
        "api_jobs": "train",
        "api_pairs": "read",
        "api_corrections": "read",
    }


def _patterns(patterns):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _patterns(pattern.url_patterns)
        else:
            yield pattern


def test_an_api_endpoint_without_a_scope_is_refused_when_declared():
    with pytest.raises(ImproperlyConfigured, match="scope"):
        permission_required(Perm.MANAGE, api=True)


def test_a_browser_session_is_not_limited_by_scopes(client, make_user):
    client.force_login(make_user(Role.VIEWER))
    assert client.get(reverse("core:api_me")).status_code == 200


def test_a_password_change_revokes_the_users_tokens(client, make_user):
    user = make_user(Role.VIEWER)
    token, secret = api_token_create(user=user, name="x")
    user.set_password("a-new-and-different-passphrase")
    user.save()
    response = client.get(reverse("core:api_me"), **bearer(secret))
    assert response.status_code == 401
    assert "revoked" in response.json()["error"]
    event = AuditEvent.objects.get(action="api_token.revoke", target_id=str(token.pk))
    assert event.data["reason"] == "password changed"


def test_a_password_changed_on_the_admin_page_revokes_the_users_tokens(client, make_user):
    admin, user = make_user(Role.ADMIN), make_user(Role.VIEWER)
    admin.is_staff = admin.is_superuser = True
    admin.save()
    _, secret = api_token_create(user=user, name="x")
    client.force_login(admin)
    url = reverse("admin:auth_user_password_change", args=[user.pk])
    new = "another-long-unusual-passphrase"
    response = client.post(url, {"password1": new, "password2": new, "usable_password": "true"})
    assert response.status_code == 302
    client.logout()
    assert client.get(reverse("core:api_me"), **bearer(secret)).status_code == 401


def test_a_rehash_of_the_same_password_at_login_keeps_the_tokens(client, make_user, settings):
    user = make_user(Role.VIEWER)
    _, secret = api_token_create(user=user, name="x")
    # A new preferred hasher makes Django re-hash the password at the next login, as a Django upgrade does.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher", *settings.PASSWORD_HASHERS]
    response = client.post(reverse("login"), {"username": user.username, "password": PASSWORD})
    assert response.status_code == 302
    user.refresh_from_db()
    assert user.password.startswith("md5$")
    client.logout()
    assert client.get(reverse("core:api_me"), **bearer(secret)).status_code == 200


def test_a_token_of_a_deactivated_user_gets_401_saying_so(client, make_user):
    user = make_user(Role.VIEWER)
    _, secret = api_token_create(user=user, name="x")
    user.is_active = False
    user.save()
    response = client.get(reverse("core:api_me"), **bearer(secret))
    assert response.status_code == 401
    assert "deactivated" in response.json()["error"]


def test_the_account_page_creates_a_token_with_the_chosen_scopes_and_expiry(client, make_user):
    user = make_user(Role.REVIEWER)
    client.force_login(user)
    client.post(reverse("core:token_list"), {"name": "agent", "scopes": ["ingest"], "expires_in_days": "30"})
    token = ApiToken.objects.get(user=user)
    assert token.scopes == ["ingest"]
    assert timedelta(days=29, hours=23) < token.expires_at - timezone.now() <= timedelta(days=30)
    page = client.get(reverse("core:token_list")).content.decode()
    assert "<td>ingest</td>" in page and token.expires_at.strftime("%Y-%m-%d") in page


def test_the_account_page_makes_a_token_that_never_expires_only_when_asked(client, make_user):
    user = make_user(Role.REVIEWER)
    client.force_login(user)
    client.post(reverse("core:token_list"), {"name": "agent", "scopes": ["read", "train"], "expires_in_days": ""})
    token = ApiToken.objects.get(user=user)
    assert (token.scopes, token.expires_at) == (["read", "train"], None)


def test_the_account_page_refuses_a_token_without_a_scope(client, make_user):
    user = make_user(Role.REVIEWER)
    client.force_login(user)
    response = client.post(reverse("core:token_list"), {"name": "agent", "expires_in_days": "30"})
    assert response.status_code == 200
    assert "Pick at least one scope" in response.content.decode()
    assert not ApiToken.objects.filter(user=user).exists()


def test_the_migration_gives_existing_tokens_every_scope(make_user):
    migration = importlib.import_module("flywheel.core.migrations.0004_apitoken_scopes")
    token, _ = api_token_create(user=make_user(Role.VIEWER), name="old")
    ApiToken.objects.filter(pk=token.pk).update(scopes=[])
    migration.grant_all_scopes(django_apps, None)
    token.refresh_from_db()
    assert token.scopes == ["ingest", "read", "train"]


def test_the_command_line_makes_a_token_with_scopes_and_expiry(make_user):
    user = make_user(Role.REVIEWER)
    out = io.StringIO()
    call_command("create_api_token", user.username, "--scope", "ingest", "--expires-in-days", "7", stdout=out)
    token = ApiToken.objects.get(user=user)
    assert out.getvalue().strip().startswith(token.prefix)
    assert token.scopes == ["ingest"]
    assert timedelta(days=6, hours=23) < token.expires_at - timezone.now() <= timedelta(days=7)
