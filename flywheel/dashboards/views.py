"""The home page (where the flywheel stands, each tile linking to its page) and the dashboards page."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render

from flywheel.core import selectors as core_selectors
from flywheel.core.access import AuthedRequest, permission_required
from flywheel.core.charts import figure_html
from flywheel.core.roles import Perm
from flywheel.dashboards import charts
from flywheel.dashboards import selectors as dashboard_selectors
from flywheel.ingest import selectors as ingest_selectors
from flywheel.triage import selectors as triage_selectors


@permission_required(Perm.VIEW)
def home(request: AuthedRequest) -> HttpResponse:
    can_audit = request.user.has_perm(Perm.VIEW_AUDIT)
    context = {
        "agents": core_selectors.agent_list(),
        "trajectories": ingest_selectors.trajectory_counts(),
        "triage": triage_selectors.triage_counts(),
        "tasks": dashboard_selectors.task_counts(),
        "jobs": dashboard_selectors.job_counts(),
        "live_versions": dashboard_selectors.live_versions(),
        "bucket_chart": figure_html(charts.bucket_chart(dashboard_selectors.failures_by_bucket())),
        "roles": core_selectors.user_role_names(user=request.user),
        "recent_events": core_selectors.audit_event_list()[:10] if can_audit else None,
    }
    return render(request, "dashboards/home.html", context)


@permission_required(Perm.VIEW)
def index(request: AuthedRequest) -> HttpResponse:
    figures = [
        charts.bucket_chart(dashboard_selectors.failures_by_bucket()),
        charts.group_chart(dashboard_selectors.failures_by_agent(), title="Failures per agent"),
        charts.group_chart(dashboard_selectors.failures_by_model_version(), title="Failures per model version"),
        charts.day_chart(dashboard_selectors.failures_by_day()),
    ]
    return render(request, "dashboards/index.html", {"charts": [figure_html(figure) for figure in figures]})
