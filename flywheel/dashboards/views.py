"""The home page: where the flywheel stands, each tile linking to its page."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render

from flywheel.core import selectors as core_selectors
from flywheel.core.access import AuthedRequest, permission_required
from flywheel.core.roles import Perm
from flywheel.ingest import selectors as ingest_selectors


@permission_required(Perm.VIEW)
def home(request: AuthedRequest) -> HttpResponse:
    can_audit = request.user.has_perm(Perm.VIEW_AUDIT)
    context = {
        "agents": core_selectors.agent_list(),
        "trajectories": ingest_selectors.trajectory_counts(),
        "roles": core_selectors.user_role_names(user=request.user),
        "recent_events": core_selectors.audit_event_list()[:10] if can_audit else None,
    }
    return render(request, "dashboards/home.html", context)
