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
from flywheel.monitoring import selectors as monitoring_selectors
from flywheel.monitoring.forms import AlertRollbackForm


@permission_required(Perm.VIEW)
def home(request: AuthedRequest) -> HttpResponse:
    can_audit = request.user.has_perm(Perm.VIEW_AUDIT)
    viewer = request.user
    counted = dashboard_selectors.dashboard_counts(viewer=viewer)
    context = {
        "agents": core_selectors.agent_list(viewer=viewer),
        "counts": dashboard_selectors.home_counts(counted, viewer=viewer),
        "tasks": dashboard_selectors.task_counts(viewer=viewer),
        "jobs": dashboard_selectors.job_counts(viewer=viewer),
        "live_versions": dashboard_selectors.live_versions(viewer=viewer),
        "bucket_chart": figure_html(charts.bucket_chart(dashboard_selectors.failures_by_bucket(counted))),
        "roles": core_selectors.user_role_names(user=viewer),
        "recent_events": core_selectors.audit_event_list(viewer=viewer)[:10] if can_audit else None,
        # Regression alerts: every viewer sees them; approvers get the one-click rollback (with a reason).
        "alerts": monitoring_selectors.alerts_open(viewer=viewer),
        "rollback_form": AlertRollbackForm() if viewer.has_perm(Perm.APPROVE_VERSIONS) else None,
    }
    return render(request, "dashboards/home.html", context)


@permission_required(Perm.VIEW)
def index(request: AuthedRequest) -> HttpResponse:
    counted = dashboard_selectors.dashboard_counts(viewer=request.user)
    figures = [
        charts.bucket_chart(dashboard_selectors.failures_by_bucket(counted)),
        charts.group_chart(dashboard_selectors.failures_by_agent(counted), title="Failures per agent"),
        charts.group_chart(dashboard_selectors.failures_by_model_version(counted), title="Failures per model version"),
        charts.day_chart(dashboard_selectors.failures_by_day(counted)),
    ]
    charts_html = [figure_html(figure) for figure in figures]
    return render(request, "dashboards/index.html", {"charts": charts_html, "counted_at": counted.counted_at})
