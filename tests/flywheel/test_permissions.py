"""The permission matrix: every URL pattern, for anonymous callers and each role.

The patterns are read from the URLconf, so a new page without a permission check fails here.
Each view declares what it requires (`flywheel.core.access`); the roles' permissions are the
table in `flywheel.core.roles` (documented in README.md, "Roles").
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.urls.converters import IntConverter, SlugConverter, UUIDConverter

from flywheel.core.access import ANY_SIGNED_IN
from flywheel.core.roles import ROLE_PERMISSIONS, Role

NOT_ALLOWED = {401, 403}


@dataclass(frozen=True)
class Endpoint:
    url: str
    name: str
    required: str | None  # None: public
    is_api: bool

    def __str__(self) -> str:
        return self.name


def _sample_value(converter: Any) -> Any:
    if isinstance(converter, UUIDConverter):
        return uuid.UUID(int=0)
    if isinstance(converter, IntConverter):
        return 999_999
    if isinstance(converter, SlugConverter):
        return "no-such-thing"
    return "x"


def _walk(patterns: list, namespace: str = "") -> list[tuple[str, URLPattern]]:
    found = []
    for entry in patterns:
        if isinstance(entry, URLResolver):
            if entry.app_name == "admin":
                continue  # Django's admin checks is_staff itself; see test_the_admin_needs_staff
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            found += _walk(entry.url_patterns, inner)
        else:
            found.append((f"{namespace}{entry.name}", entry))
    return found


def _endpoints() -> list[Endpoint]:
    endpoints = []
    for name, pattern in _walk(get_resolver().url_patterns):
        kwargs = {key: _sample_value(conv) for key, conv in pattern.pattern.converters.items()}
        callback = pattern.callback
        if not hasattr(callback, "required_permission"):
            pytest.fail(f"{name} has no permission check (use permission_required or public)")
        required = callback.required_permission
        endpoints.append(Endpoint(reverse(name, kwargs=kwargs), name, required, getattr(callback, "is_api", False)))
    return endpoints


ENDPOINTS = _endpoints()
PERSONAS: list[Role | None] = [*Role, None]


def test_every_endpoint_is_in_the_matrix():
    assert {endpoint.name for endpoint in ENDPOINTS} >= {"dashboards:home", "core:api_me", "healthz", "login"}


def _allowed(required: str | None, role: Role | None) -> bool:
    if required is None or required == ANY_SIGNED_IN:
        return True
    return role is not None and required in ROLE_PERMISSIONS[role]


def _is_login_redirect(response) -> bool:
    return response.status_code == 302 and response["Location"].startswith(reverse("login"))


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=str)
def test_anonymous_callers_get_a_login_redirect_or_401(client, endpoint):
    response = client.get(endpoint.url)
    if endpoint.required is None:
        assert response.status_code not in NOT_ALLOWED and not _is_login_redirect(response)
    elif endpoint.is_api:
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer")
    else:
        assert _is_login_redirect(response)


@pytest.mark.django_db
@pytest.mark.parametrize("role", PERSONAS, ids=lambda role: role.value if role else "no-role")
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=str)
def test_each_role_gets_the_documented_answer(client, make_user, endpoint, role):
    client.force_login(make_user(role))
    response = client.get(endpoint.url)
    if _allowed(endpoint.required, role):
        assert response.status_code not in NOT_ALLOWED, response.content[:300]
        assert not _is_login_redirect(response)
    else:
        assert response.status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize("role", [Role.VIEWER, Role.APPROVER])
def test_the_admin_needs_staff(client, make_user, role):
    client.force_login(make_user(role))
    response = client.get(reverse("admin:index"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))
