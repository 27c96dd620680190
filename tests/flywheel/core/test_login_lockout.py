"""Login lockout (django-axes): wrong passwords in a row lock an account and an address, for the app and the admin."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from flywheel.core.roles import Role
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
WRONG = "not-the-password"


def sign_in(client, username: str, password: str, url: str | None = None):
    return client.post(url or reverse("login"), {"username": username, "password": password})


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_thirty_wrong_passwords_lock_the_account_and_the_right_one_no_longer_works(client, make_user, settings):
    user = make_user(Role.VIEWER)
    answers = [sign_in(client, user.username, WRONG).status_code for _ in range(30)]
    limit = settings.AXES_FAILURE_LIMIT
    # The form again ("wrong password") until the limit; from the failure that reaches it on, the lockout page.
    assert answers == [200] * (limit - 1) + [429] * (30 - limit + 1)

    locked = sign_in(client, user.username, PASSWORD)
    assert locked.status_code == 429
    assert not signed_in(client)
    page = locked.content.decode()
    assert "locked" in page.lower() and "15 minutes" in page


def test_the_admin_login_is_locked_too(client, make_user, settings):
    admin = make_user(Role.ADMIN)
    admin.is_staff = admin.is_superuser = True
    admin.save()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, admin.username, WRONG, reverse("admin:login"))
    locked = sign_in(client, admin.username, PASSWORD, reverse("admin:login"))
    assert locked.status_code == 429
    assert not signed_in(client)


def test_a_success_resets_the_count_so_only_failures_in_a_row_lock(client, make_user, settings):
    user = make_user(Role.VIEWER)
    for _ in range(2):
        for _ in range(settings.AXES_FAILURE_LIMIT - 1):
            sign_in(client, user.username, WRONG)
        assert sign_in(client, user.username, PASSWORD).status_code == 302
        client.logout()


def test_many_usernames_from_one_address_lock_the_address(client, make_user, settings):
    victim = make_user(Role.VIEWER)
    for number in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, f"guess-{number}", WRONG)
    assert sign_in(client, victim.username, PASSWORD).status_code == 429


def test_the_lockout_ends_after_the_cool_off(client, make_user, settings):
    user = make_user(Role.VIEWER)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, user.username, WRONG)
    assert sign_in(client, user.username, PASSWORD).status_code == 429
    AccessAttempt.objects.update(attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME - timedelta(seconds=1))
    assert sign_in(client, user.username, PASSWORD).status_code == 302
    assert signed_in(client)


def test_an_admin_unlocks_an_account_before_the_cool_off(client, make_user, settings):
    user = make_user(Role.VIEWER)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, user.username, WRONG)
    call_command("axes_reset_username", user.username)
    call_command("axes_reset_ip", "127.0.0.1")
    assert sign_in(client, user.username, PASSWORD).status_code == 302


def test_behind_a_proxy_the_lockout_counts_the_address_the_proxy_saw(client, make_user, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    for number in range(settings.AXES_FAILURE_LIMIT):
        # The left part is the client's to write: a new forged address each time changes nothing.
        forwarded = f"10.9.8.{number}, 203.0.113.7"
        client.post(
            reverse("login"), {"username": f"guess-{number}", "password": WRONG}, HTTP_X_FORWARDED_FOR=forwarded
        )
    user = make_user(Role.VIEWER)
    credentials = {"username": user.username, "password": PASSWORD}
    assert client.post(reverse("login"), credentials, HTTP_X_FORWARDED_FOR="203.0.113.7").status_code == 429
    assert client.post(reverse("login"), credentials, HTTP_X_FORWARDED_FOR="198.51.100.2").status_code == 302
