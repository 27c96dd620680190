"""Pages of the monitoring app: the monitor per agent, its scoring rules, and the rollback from an alert.

Views parse, call one service or selector, and render. Anyone who may see an agent sees its monitor
and rules; trainers (and admins) create, change and delete rules; approvers roll back from an alert,
with a written reason, as on the registry's page.
"""

from __future__ import annotations

from uuid import UUID

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from flywheel.core.access import AuthedRequest, agent_get_or_404, permission_required
from flywheel.core.charts import figure_html
from flywheel.core.models import Agent
from flywheel.core.roles import Perm
from flywheel.monitoring import charts, selectors, services
from flywheel.monitoring.forms import AlertRollbackForm, ScoringRuleForm
from flywheel.monitoring.models import MonitoredRate, ScoringRule
from flywheel.registry.services import RegistryRefused


def _rule(request: AuthedRequest, agent_name: str, rule_id: int) -> ScoringRule:
    rule = selectors.rule_get(agent=agent_get_or_404(viewer=request.user, name=agent_name), rule_id=rule_id)
    if rule is None:
        raise Http404("no such rule")
    return rule


@permission_required(Perm.VIEW)
def index(request: AuthedRequest) -> HttpResponse:
    return render(request, "monitoring/index.html", {"agents": selectors.agent_summaries(viewer=request.user)})


@permission_required(Perm.VIEW)
def agent_monitor(request: AuthedRequest, agent_name: str) -> HttpResponse:
    monitor = selectors.monitor_get(agent=agent_get_or_404(viewer=request.user, name=agent_name))
    figures = [charts.rate_figure(monitor.days, monitor.marks, rate) for rate in MonitoredRate.values]
    figures += [chart(monitor.days, monitor.marks) for chart in (charts.latency_figure, charts.tokens_figure,
                                                                 charts.cost_figure)]  # fmt: skip
    approver = request.user.has_perm(Perm.APPROVE_VERSIONS)
    context = {"monitor": monitor, "agent": monitor.agent, "rates": MonitoredRate.choices,
               "charts": [figure_html(figure) for figure in figures],
               "rollback_form": AlertRollbackForm() if approver else None}  # fmt: skip
    return render(request, "monitoring/agent_monitor.html", context)


@permission_required(Perm.VIEW)
def rule_list(request: AuthedRequest, agent_name: str) -> HttpResponse:
    agent = agent_get_or_404(viewer=request.user, name=agent_name)
    return render(request, "monitoring/rule_list.html", {"agent": agent, "rules": selectors.rule_list(agent=agent)})


def _rule_form_page(request: AuthedRequest, agent: Agent, rule: ScoringRule | None) -> HttpResponse:
    initial = ScoringRuleForm.initial_for(rule) if rule else None
    form = ScoringRuleForm(request.POST if request.method == "POST" else None, agent=agent, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            if rule is None:
                services.rule_create(actor=request.user, agent=agent, fields=form.rule_fields())
            else:
                services.rule_update(actor=request.user, rule=rule, fields=form.rule_fields())
        except ValidationError as error:
            form.add_error(None, error)
        else:
            messages.success(request, f"Scoring rule {form.cleaned_data['name']!r} saved.")
            return redirect("monitoring:rule_list", agent_name=agent.name)
    status = 400 if request.method == "POST" else 200
    return render(request, "monitoring/rule_form.html", {"agent": agent, "rule": rule, "form": form}, status=status)


@permission_required(Perm.LAUNCH_JOBS)
def rule_new(request: AuthedRequest, agent_name: str) -> HttpResponse:
    return _rule_form_page(request, agent_get_or_404(viewer=request.user, name=agent_name), None)


@permission_required(Perm.LAUNCH_JOBS)
def rule_edit(request: AuthedRequest, agent_name: str, rule_id: int) -> HttpResponse:
    rule = _rule(request, agent_name, rule_id)
    return _rule_form_page(request, rule.agent, rule)


@permission_required(Perm.LAUNCH_JOBS)
@require_POST
def rule_delete(request: AuthedRequest, agent_name: str, rule_id: int) -> HttpResponse:
    rule = _rule(request, agent_name, rule_id)
    services.rule_delete(actor=request.user, rule=rule)
    messages.success(request, f"Scoring rule {rule.name!r} deleted; its scores stay.")
    return redirect("monitoring:rule_list", agent_name=agent_name)


@permission_required(Perm.APPROVE_VERSIONS)
@require_POST
def alert_rollback(request: AuthedRequest, alert_id: UUID) -> HttpResponse:
    alert = selectors.alert_get(alert_id=alert_id, viewer=request.user)
    if alert is None:
        raise Http404("no such alert")
    back = request.POST.get("next") == "monitor"
    form = AlertRollbackForm(request.POST)
    if not form.is_valid():
        messages.error(request, "A rollback needs a written reason.")
    else:
        try:
            deployment = services.alert_rollback(actor=request.user, alert=alert, reason=form.cleaned_data["reason"])
        except (RegistryRefused, services.MonitoringRefused) as error:
            messages.error(request, str(error))
        else:
            done = (
                f"Rolled back {alert.agent.name} to {alert.predecessor.tag}"
                if deployment
                else f"{alert.predecessor.tag} was live already"
            )
            messages.success(request, f"{done}; the alert is resolved.")
    return redirect("monitoring:agent_monitor", agent_name=alert.agent.name) if back else redirect("dashboards:home")
