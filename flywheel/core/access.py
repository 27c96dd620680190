"""One helper to require a permission, for pages and for API endpoints, and the API's rate limits.

Pages: an anonymous visitor is redirected to the login page, a signed-in user without the
permission gets 403. API endpoints (`api=True`): the caller authenticates with
`Authorization: Bearer <token>` (or a browser session, CSRF-checked), an anonymous call
gets 401 with `WWW-Authenticate`, an expired, revoked or deactivated token 401 saying which,
a missing permission 403, and a token without the endpoint's scope 403 naming the scope, all
as JSON. `rate_limited` answers 429 with `Retry-After` once a token (or a signed-in user) has
spent its budget; the counts live in the default cache (Redis in production). Login lockout
is django-axes' work (settings, "Login lockout"): this module only tells it the caller's address.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt
from django_ratelimit.core import get_usage

from flywheel.core.models import Agent, ApiToken
from flywheel.core.roles import Perm
from flywheel.core.selectors import agent_get
from flywheel.core.services import ApiTokenRejected, api_token_authenticate

logger = logging.getLogger(__name__)
View = Callable[..., HttpResponseBase]
ANY_SIGNED_IN = "signed-in"
Scope = ApiToken.Scope

# The scope a token needs for an API endpoint, from the permission the endpoint requires. Chat
# completions need `read` like the live API: they read the live version (at a cost the rate limit bounds).
SCOPE_FOR_PERMISSION: dict[str, Scope] = {
    Perm.VIEW: Scope.READ,
    Perm.INGEST: Scope.INGEST,
    Perm.LAUNCH_JOBS: Scope.TRAIN,
}


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
        try:
            token = api_token_authenticate(secret=secret)
        except ApiTokenRejected as rejected:
            return _json_error(401, str(rejected))
        request.user = token.user
        request.api_token = token  # type: ignore[attr-defined]
        return None
    if not request.user.is_authenticated:
        return _json_error(401, "authentication required: send Authorization: Bearer <token>")
    # A browser session is subject to CSRF like any form post; a bearer token is not.
    rejection = CsrfViewMiddleware(lambda r: HttpResponse()).process_view(request, view, (), {})
    return rejection


def _api_scope(perm: str, scope: Scope | None) -> Scope:
    found = scope or SCOPE_FOR_PERMISSION.get(perm)
    if found is None:
        raise ImproperlyConfigured(f"an API endpoint requiring {perm} must name the token scope it needs")
    return found


def _missing_scope(request: HttpRequest, scope: Scope) -> JsonResponse | None:
    """403 naming the scope when a token lacks it; a browser session has no scopes to check."""
    token: ApiToken | None = getattr(request, "api_token", None)
    if token is None or token.allows(scope):
        return None
    return _json_error(403, f"this API token lacks the '{scope}' scope")


def permission_required(perm: str, *, api: bool = False, scope: Scope | None = None) -> Callable[[View], View]:
    """Require `perm` (a `Perm`, or ANY_SIGNED_IN for pages about the user themself).

    An API endpoint also requires a token scope: `scope`, or the one SCOPE_FOR_PERMISSION maps
    `perm` to; an endpoint with neither is refused when it is declared, not when it is called.
    """
    required_scope = _api_scope(perm, scope) if api else None

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
            if required_scope is not None and (lacking := _missing_scope(request, required_scope)):
                return lacking
            return view(request, *args, **kwargs)

        wrapper.required_permission = perm  # type: ignore[attr-defined]
        wrapper.required_scope = required_scope  # type: ignore[attr-defined]
        wrapper.is_api = api  # type: ignore[attr-defined]
        return csrf_exempt(wrapper) if api else wrapper

    return decorate


def _caller_key(group: str, request: HttpRequest) -> str:
    token: ApiToken | None = getattr(request, "api_token", None)
    return f"token:{token.pk}" if token is not None else f"user:{request.user.pk}"


def _budget(group: str) -> tuple[int, int]:
    """(requests, seconds) for `group`; read per request, so a settings override applies at once."""
    return settings.API_RATE_LIMITS[group], settings.API_RATE_WINDOW_SECONDS


def _too_many(group: str, request: HttpRequest) -> int | None:
    """Seconds until the caller may send again once over its budget; None while within it."""
    try:
        usage = get_usage(request, group=f"flywheel.{group}", key=_caller_key, rate=_budget(group), increment=True)
    except Exception:
        # A cache outage must not stop ingestion or chat: the limit protects, it is not correctness.
        logger.exception("rate limit for %s not checked: the cache failed", group)
        return None
    if usage is None or not usage["should_limit"]:
        return None
    # The library's window still counts at its last whole second: the next one opens a second later.
    return max(1, int(usage["time_left"]) + 1)


def rate_limited(group: str, *, error: Callable[[int, str], JsonResponse] = _json_error) -> Callable[[View], View]:
    """Answer 429 with Retry-After once the caller has sent API_RATE_LIMITS[group] requests in the window.

    Goes under `permission_required(..., api=True)`: the caller is its token, else its user.
    `error` shapes the JSON body (the chat endpoint answers in OpenAI's error form).
    """
    if group not in settings.API_RATE_LIMITS:
        raise ImproperlyConfigured(f"no API_RATE_LIMITS entry for {group!r}")

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            retry_after = _too_many(group, request)
            if retry_after is None:
                return view(request, *args, **kwargs)
            limit, window = _budget(group)
            message = f"rate limit: {limit} requests per {window} s for each token; retry in {retry_after} s"
            response = error(429, message)
            response["Retry-After"] = str(retry_after)
            return response

        return wrapper

    return decorate


def public(view: View) -> View:
    """Mark a view as deliberately open to anyone (health checks, the login page)."""
    view.required_permission = None  # type: ignore[attr-defined]
    return view


def client_address(request: HttpRequest) -> str:
    """The caller's address for the login lockout (AXES_CLIENT_IP_CALLABLE).

    REMOTE_ADDR, or behind TRUSTED_PROXY_COUNT proxies the X-Forwarded-For entry the outermost of
    them appended; the entries left of it come from the client, who may forge them.
    """
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
    proxies = settings.TRUSTED_PROXY_COUNT
    if proxies and len(forwarded) >= proxies:
        return forwarded[-proxies]
    return str(request.META.get("REMOTE_ADDR", ""))


def agent_get_or_404(*, viewer: User, name: str) -> Agent:
    """For a page about one agent: the agent called `name` if `viewer` may see it; one Http404 alike for no
    such agent and for another's, so that a URL never tells whether an agent exists."""
    agent = agent_get(viewer=viewer, name=name)
    if agent is None:
        raise Http404("no such agent")
    return agent
