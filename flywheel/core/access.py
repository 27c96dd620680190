"""One helper to require a permission, for pages and for API endpoints.

Pages: an anonymous visitor is redirected to the login page, a signed-in user without the
permission gets 403. API endpoints (`api=True`): the caller authenticates with
`Authorization: Bearer <token>` (or a browser session, CSRF-checked), an anonymous call
gets 401 with `WWW-Authenticate`, a missing permission 403, both as JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.models import User
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from flywheel.core.services import api_token_authenticate

View = Callable[..., HttpResponseBase]
ANY_SIGNED_IN = "signed-in"


class AuthedRequest(HttpRequest):
    """The request a permission-checked view receives: its user is signed in."""

    user: User


def _json_error(status: int, message: str) -> JsonResponse:
    response = JsonResponse({"error": message}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="flywheel"'
    return response


def _bearer_secret(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return secret.strip()


def _api_caller(request: HttpRequest, view: View) -> HttpResponseBase | None:
    """Authenticate an API request in place; a response when it must stop here."""
    secret = _bearer_secret(request)
    if secret is not None:
        token = api_token_authenticate(secret=secret) if secret else None
        if token is None:
            return _json_error(401, "invalid or revoked API token")
        request.user = token.user
        request.api_token = token  # type: ignore[attr-defined]
        return None
    if not request.user.is_authenticated:
        return _json_error(401, "authentication required: send Authorization: Bearer <token>")
    # A browser session is subject to CSRF like any form post; a bearer token is not.
    rejection = CsrfViewMiddleware(lambda r: HttpResponse()).process_view(request, view, (), {})
    return rejection


def permission_required(perm: str, *, api: bool = False) -> Callable[[View], View]:
    """Require `perm` (a `Perm`, or ANY_SIGNED_IN for pages about the user themself)."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if api:
                stop = _api_caller(request, view)
                if stop is not None:
                    return stop
            elif not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if perm != ANY_SIGNED_IN and not request.user.has_perm(perm):
                if api:
                    return _json_error(403, f"permission {perm} required")
                raise PermissionDenied(f"permission {perm} required")
            return view(request, *args, **kwargs)

        wrapper.required_permission = perm  # type: ignore[attr-defined]
        wrapper.is_api = api  # type: ignore[attr-defined]
        return csrf_exempt(wrapper) if api else wrapper

    return decorate


def public(view: View) -> View:
    """Mark a view as deliberately open to anyone (health checks, the login page)."""
    view.required_permission = None  # type: ignore[attr-defined]
    return view
