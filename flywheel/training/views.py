"""Pages and API of the training app: jobs (list, launch, live page, cancel) and POST /api/v1/jobs."""

from __future__ import annotations

import json
from uuid import UUID

from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from flywheel.core.access import AuthedRequest, permission_required
from flywheel.core.roles import Perm
from flywheel.datasets.models import TaskSetSnapshot
from flywheel.training import charts, selectors, services
from flywheel.training.forms import JobLaunchForm
from flywheel.training.models import Job, JobKind, JobState

LIVE_CHART_METRICS = [
    "mean_reward",
    "valid_json_rate",
    "correct_tool_rate",
    "correct_arguments_rate",
    "unsafe_action_rate",
]


@permission_required(Perm.VIEW)
def job_list(request: AuthedRequest) -> HttpResponse:
    filters = {key: request.GET.get(key, "") for key in ("kind", "state", "agent", "launched_by")}
    context = {"jobs": selectors.job_list(**filters)[:200], "filters": filters, "kinds": JobKind.choices,
               "states": JobState.choices}  # fmt: skip
    return render(request, "training/job_list.html", context)


@permission_required(Perm.LAUNCH_JOBS)
def job_new(request: AuthedRequest) -> HttpResponse:
    form = JobLaunchForm(request.POST or None, initial={"snapshot": request.GET.get("snapshot")})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            job = services.job_launch(
                actor=request.user, kind=data["kind"], snapshot=data["snapshot"], base_model=data["base_model"],
                adapter=data["adapter"], agent=data["snapshot"].agent, hyperparameters=data["hyperparameters"],
            )  # fmt: skip
        except services.LaunchRefused as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("training:job_detail", job_id=job.id)
    return render(request, "training/job_new.html", {"form": form})


def _live_context(job: Job) -> dict[str, object]:
    return {
        "job": job,
        "metrics": selectors.latest_metrics(job=job),
        "samples": selectors.job_samples(job=job)[:50],
        "eval_run": getattr(job, "eval_run", None) if job.state == JobState.SUCCEEDED else None,
    }


@permission_required(Perm.VIEW)
def job_detail(request: AuthedRequest, job_id: UUID) -> HttpResponse:
    job = get_object_or_404(Job.objects.select_related("snapshot", "launched_by"), pk=job_id)
    return render(request, "training/job_detail.html", _live_context(job))


@permission_required(Perm.VIEW)
def job_live(request: AuthedRequest, job_id: UUID) -> HttpResponse:
    job = get_object_or_404(Job.objects.select_related("snapshot"), pk=job_id)
    return render(request, "training/_job_live.html", _live_context(job))


@permission_required(Perm.VIEW)
def job_chart(request: AuthedRequest, job_id: UUID) -> JsonResponse:
    job = get_object_or_404(Job, pk=job_id)
    series = selectors.metric_series(job=job)
    names = [name for name in LIVE_CHART_METRICS if name in series] or None
    return JsonResponse({"figure": charts.metrics_figure(series, names), "finished": job.is_finished})


@permission_required(Perm.LAUNCH_JOBS)
@require_POST
def job_cancel(request: AuthedRequest, job_id: UUID) -> HttpResponse:
    services.job_cancel(actor=request.user, job=get_object_or_404(Job, pk=job_id))
    return redirect("training:job_detail", job_id=job_id)


@permission_required(Perm.LAUNCH_JOBS, api=True)
@require_POST
def api_jobs(request: AuthedRequest) -> JsonResponse:
    """Launch a job: {"kind", "snapshot" (id or content hash), "base_model", "adapter"?, "hyperparameters"?,
    "heldout_snapshot"? (sft and grpo evaluate on it as they train)}."""
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return JsonResponse({"error": "the body is not valid JSON"}, status=400)
    if not isinstance(body, dict):
        return JsonResponse({"error": "the body must be a JSON object"}, status=400)
    snapshot = _snapshot(body.get("snapshot"))
    if snapshot is None:
        reference = body.get("snapshot")
        return JsonResponse({"error": f"no snapshot {reference!r} (give its id or content hash)"}, status=400)
    heldout = _snapshot(body["heldout_snapshot"]) if body.get("heldout_snapshot") else None
    if body.get("heldout_snapshot") and heldout is None:
        return JsonResponse({"error": f"no held-out snapshot {body['heldout_snapshot']!r}"}, status=400)
    try:
        job = services.job_launch(
            actor=request.user, kind=str(body.get("kind", "")), snapshot=snapshot,
            base_model=str(body.get("base_model", "")), adapter=str(body.get("adapter") or ""), agent=snapshot.agent,
            hyperparameters=body.get("hyperparameters") or {}, heldout_snapshot=heldout,
        )  # fmt: skip
    except services.LaunchRefused as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({"id": str(job.id), "state": job.state, "snapshot": snapshot.content_hash}, status=201)


def _snapshot(reference: object) -> TaskSetSnapshot | None:
    """A snapshot by content hash or id."""
    text = str(reference or "")
    snapshot = TaskSetSnapshot.objects.filter(content_hash=text).first()
    if snapshot is None and len(text) == 36:
        snapshot = TaskSetSnapshot.objects.filter(pk=text).first()
    return snapshot
