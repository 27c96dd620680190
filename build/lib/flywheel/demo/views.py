"""The demo's one action: the home page's "Run the demo loop" button (admins) posts here."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from flywheel.core.access import AuthedRequest, permission_required
from flywheel.core.roles import Perm
from flywheel.core.selectors import sees_all_agents
from flywheel.demo.services import DemoFailed, demo_people
from flywheel.demo.tasks import demo_advance_task


@permission_required(Perm.MANAGE)
@require_POST
def loop_start(request: AuthedRequest) -> HttpResponse:
    """Start (or move on) the demo loop on the worker; its jobs show on the Jobs page."""
    if not sees_all_agents(request.user):
        # The loop creates and trains its own agents: an operator's action, not a member's.
        raise PermissionDenied("the demo loop needs access to every agent")
    try:
        demo_people()
    except DemoFailed as error:
        messages.error(request, str(error))
        return redirect("dashboards:home")
    demo_advance_task.delay()
    messages.success(request, "The demo loop is on the worker: baseline, SFT, GRPO, gate, then promotion "
                              "when the gate passes. Each step is a job on this page.")  # fmt: skip
    return redirect("training:job_list")
