"""Pages and API endpoints of the core app: agents, audit log, API tokens, health."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from flywheel.core import selectors, services
from flywheel.core.access import ANY_SIGNED_IN, AuthedRequest, agent_get_or_404, permission_required, public
from flywheel.core.forms import ApiTokenForm
from flywheel.core.health import broker_problem, database_problem
from flywheel.core.models import ApiToken
from flywheel.core.roles import Perm

AUDIT_PAGE_SIZE = 50


@permission_required(Perm.VIEW)
def agent_list(request: AuthedRequest) -> HttpResponse:
    return render(request, "core/agent_list.html", {"agents": selectors.agent_list(viewer=request.user)})


@permission_required(Perm.VIEW)
def agent_detail(request: AuthedRequest, name: str) -> HttpResponse:
    agent = agent_get_or_404(viewer=request.user, name=name)
    return render(request, "core/agent_detail.html", {"agent": agent})


@permission_required(Perm.VIEW_AUDIT)
def audit_list(request: AuthedRequest) -> HttpResponse:
    filters = {key: request.GET.get(key, "").strip() for key in ("action", "actor", "target_type")}
    events = selectors.audit_event_list(viewer=request.user, **filters)
    page = Paginator(events, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    context = {"page": page, "filters": filters, "actions": selectors.audit_action_names()}
    return render(request, "core/audit_list.html", context)


@permission_required(ANY_SIGNED_IN)
def token_list(request: AuthedRequest) -> HttpResponse:
    form = ApiTokenForm(request.POST or None)
    new_secret = None
    if request.method == "POST" and form.is_valid():
        _, new_secret = services.api_token_create(
            user=request.user,
            name=form.cleaned_data["name"],
            scopes=form.cleaned_data["scopes"],
            expires_at=form.expires_at(),
        )
        form = ApiTokenForm()
    context = {
        "tokens": selectors.api_token_list(user=request.user),
        "form": form,
        "new_secret": new_secret,
        "scope_choices": ApiToken.Scope.choices,
    }
    return render(request, "core/token_list.html", context)


@permission_required(ANY_SIGNED_IN)
@require_POST
def token_revoke(request: AuthedRequest, token_id: str) -> HttpResponse:
    token = get_object_or_404(selectors.api_token_list(user=request.user), pk=token_id)
    services.api_token_revoke(actor=request.user, token=token)
    messages.success(request, f"Token “{token.name}” revoked.")
    return redirect("core:token_list")


@permission_required(Perm.VIEW, api=True)
@require_GET
def api_me(request: AuthedRequest) -> JsonResponse:
    user = request.user
    perms = sorted(perm for perm in user.get_all_permissions() if perm.startswith("core."))
    roles = selectors.user_role_names(user=user)
    return JsonResponse({"username": user.get_username(), "roles": roles, "permissions": perms})


@public
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    problems = {"database": database_problem(), "broker": broker_problem()}
    failing = sorted(part for part, problem in problems.items() if problem)
    checks = {part: problem or "ok" for part, problem in problems.items()}
    body = {"status": "fail" if failing else "ok", "failing": failing, "checks": checks}
    return JsonResponse(body, status=503 if failing else 200)
