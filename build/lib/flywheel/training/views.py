"""Pages and API of the training app: jobs (list, compare, launch, live page, samples, cancel), evaluations (with
what to try next, and the prompt-change form), and POST /api/v1/jobs.

The live page polls two things while the job runs: `job_live` (an htmx partial: state, progress,
flags, log) and `job_chart` (JSON the page's script redraws the charts from); `job_samples`
re-renders the sample table for its filters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import User
from django.http import Http404, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from flywheel.core.access import AuthedRequest, permission_required
from flywheel.core.charts import figure_json
from flywheel.core.jsonbody import JsonInputError, json_object_from_body
from flywheel.core.roles import Perm
from flywheel.core.selectors import choices_limit
from flywheel.datasets.models import SnapshotKind, Split, TaskSetSnapshot
from flywheel.datasets.selectors import snapshot_list
from flywheel.ingest.parsers.base import RecordError
from flywheel.training import charts, selectors, services
from flywheel.training.forms import (
    DEFAULT_HYPERPARAMETERS,
    HELDOUT_KINDS,
    JobCompareForm,
    JobLaunchForm,
    PromptChangeForm,
    SampleFilterForm,
    launch_initial,
    launch_url,
)
from flywheel.training.models import EvalRun, Job, JobKind, JobState
from trainer.spec.recommend import DPO, GRPO, NONE, PROMPT, SFT, Option, Recommendation

SAMPLES_SHOWN = 100
DEFAULT_COMPARE_METRIC = "reward/mean"
SAMPLE_FILTERS = ("step", "min_reward", "max_reward", "component", "component_min", "component_max")


# --- Lists ------------------------------------------------------------------------------------


@permission_required(Perm.VIEW)
def job_list(request: AuthedRequest) -> HttpResponse:
    filters = {key: request.GET.get(key, "") for key in ("kind", "state", "agent", "launched_by")}
    context = {"jobs": selectors.job_list(viewer=request.user, **filters)[:200], "filters": filters,
               "kinds": JobKind.choices, "states": JobState.choices,
               "options": selectors.job_filter_options(viewer=request.user)}  # fmt: skip
    return render(request, "training/job_list.html", context)


@permission_required(Perm.VIEW)
def job_compare(request: AuthedRequest) -> HttpResponse:
    form = choices_limit(JobCompareForm(request.GET), viewer=request.user)
    jobs = list(form.cleaned_data["job"]) if form.is_valid() else []
    names = selectors.metric_names(jobs=jobs)
    metric = form.cleaned_data.get("metric") if form.is_valid() else ""
    metric = metric or (DEFAULT_COMPARE_METRIC if DEFAULT_COMPARE_METRIC in names or not names else names[0])
    curves = selectors.compare_curves(jobs=jobs, metric=metric)
    figure = charts.compare_figure([(_job_label(curve.job), curve.points) for curve in curves], metric)
    context = {"form": form, "jobs": jobs, "metric": metric, "metric_names": names, "curves": curves,
               "figure": figure_json(figure)}  # fmt: skip
    return render(request, "training/job_compare.html", context)


def _job_label(job: Job) -> str:
    return f"{job} · {job.created_at:%Y-%m-%d %H:%M}"


# --- Launch -----------------------------------------------------------------------------------


@permission_required(Perm.LAUNCH_JOBS)
def job_new(request: AuthedRequest) -> HttpResponse:
    form = choices_limit(JobLaunchForm(request.POST or None, initial=launch_initial(request.GET)), viewer=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            job = services.job_launch(actor=request.user, **form.launch_arguments())
        except services.LaunchRefused as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("training:job_detail", job_id=job.id)
    context = {"form": form, "defaults": DEFAULT_HYPERPARAMETERS, "heldout_kinds": list(HELDOUT_KINDS)}
    return render(request, "training/job_new.html", context, status=400 if form.errors else 200)


# --- The live job page ------------------------------------------------------------------------


def _job(request: AuthedRequest, job_id: UUID) -> Job:
    """The job, if it is of an agent the user may see; 404 alike for no such job and another agent's."""
    job = selectors.job_get(job_id=job_id, viewer=request.user)
    if job is None:
        raise Http404("no such job")
    return job


def _live_context(job: Job) -> dict[str, object]:
    eval_run = selectors.eval_run_for(job=job) if job.state == JobState.SUCCEEDED else None
    mining = selectors.mine_summary(job=job)
    return {
        "job": job,
        "progress": selectors.job_progress(job=job),
        "flags": selectors.job_flags(job=job),
        "skipped_tasks": selectors.job_skipped_tasks(job=job),
        # Shown only where there are no charts; the charts' own poll reads the series.
        "metrics": selectors.latest_metrics(job=job) if job.kind == JobKind.EVAL else {},
        "eval_run": eval_run,
        "eval_report": selectors.eval_report(run=eval_run) if eval_run else None,
        "mining": mining,
        "mined_launch_url": _mined_launch_url(job, mining.snapshot) if mining and mining.snapshot else None,
        # Evaluations, mining, replays and judge runs report once, at the end: their results replace training curves.
        "has_charts": job.kind not in (JobKind.EVAL, JobKind.MINE, JobKind.REPLAY, JobKind.JUDGE),
    }


def _mined_launch_url(job: Job, snapshot: TaskSetSnapshot) -> str:
    """The launch form for GRPO on the tasks a mine job kept, from the model it mined with."""
    return launch_url({"kind": JobKind.GRPO, "snapshot": snapshot.pk, "base_model": job.base_model,
                       "adapter": job.adapter, "agent": job.agent_id or snapshot.agent_id})  # fmt: skip


def _samples_context(job: Job, query: QueryDict) -> dict[str, object]:
    steps, components = selectors.sample_facets(job=job)
    form = SampleFilterForm(query if any(key in query for key in SAMPLE_FILTERS) else {}, steps=steps,
                            components=components)  # fmt: skip
    filters = form.filters()
    samples = selectors.job_samples(job=job, **filters)
    query_string = urlencode({key: value for key, value in form.data.items() if key in SAMPLE_FILTERS and value})
    return {"job": job, "sample_form": form, "samples": samples[:SAMPLES_SHOWN], "sample_count": samples.count(),
            "components": components, "sample_query": query_string}  # fmt: skip


@permission_required(Perm.VIEW)
def job_detail(request: AuthedRequest, job_id: UUID) -> HttpResponse:
    job = _job(request, job_id)
    context = {**_live_context(job), **_samples_context(job, request.GET)}
    return render(request, "training/job_detail.html", context)


@permission_required(Perm.VIEW)
def job_live(request: AuthedRequest, job_id: UUID) -> HttpResponse:
    # `oob`: the partial brings the log tail too, swapped out of band at the page's end.
    return render(request, "training/_job_live.html", {**_live_context(_job(request, job_id)), "oob": True})


@permission_required(Perm.VIEW)
def job_samples(request: AuthedRequest, job_id: UUID) -> HttpResponse:
    job = _job(request, job_id)
    context = _samples_context(job, request.GET)
    response = render(request, "training/_job_samples.html", context)
    # The filters belong in the page's address (to share or reload), not the partial's.
    page = reverse("training:job_detail", args=[job.id])
    response["HX-Push-Url"] = f"{page}?{context['sample_query']}" if context["sample_query"] else page
    return response


@permission_required(Perm.VIEW)
def job_chart(request: AuthedRequest, job_id: UUID) -> JsonResponse:
    """The charts' figures, or `unchanged` when the caller's `?version=` still holds (points only get added)."""
    job = _job(request, job_id)
    version = selectors.metric_version(job=job)
    if request.GET.get("version") == version:
        return JsonResponse({"unchanged": True, "version": version, "finished": job.is_finished})
    series = selectors.metric_series(job=job)
    body: dict[str, Any] = {
        "version": version,
        "charts": [{"key": chart.key, "title": chart.title, "figure": figure_json(chart.figure)}
                   for chart in charts.live_charts(series)],
        "points": sum(len(points) for points in series.values()),
        "finished": job.is_finished,
    }  # fmt: skip
    return JsonResponse(body)


@permission_required(Perm.LAUNCH_JOBS)
@require_POST
def job_cancel(request: AuthedRequest, job_id: UUID) -> HttpResponse:
    services.job_cancel(actor=request.user, job=_job(request, job_id))
    return redirect("training:job_detail", job_id=job_id)


# --- Evaluations ------------------------------------------------------------------------------


@permission_required(Perm.VIEW)
def eval_detail(request: AuthedRequest, job_id: UUID) -> HttpResponse:
    job = _job(request, job_id)
    run = selectors.eval_run_for(job=job)
    if run is None:
        raise Http404("this job has no evaluation results (yet)")
    report = selectors.eval_report(run=run)
    recommendation = selectors.eval_recommendation(run=run)
    context = {
        "job": job, "report": report, "options": recommendation_options(recommendation, run),
        "alongside": selectors.eval_runs_alongside(run=run, viewer=request.user)[:20],
        "rates_figure": figure_json(charts.rates_figure(report.rates)),
        "bucket_figure": figure_json(charts.bucket_figure(report.buckets)) if report.buckets else None,
    }  # fmt: skip
    return render(request, "training/eval_detail.html", context)


@permission_required(Perm.LAUNCH_JOBS)
def prompt_change(request: AuthedRequest, job_id: UUID) -> HttpResponse:
    """Try a prompt change: the evaluated job's prompt pre-filled; on POST an eval of the changed prompt on the
    same snapshot, model and settings (no training), to compare with this one in the gate's paired view."""
    job = _job(request, job_id)
    run = selectors.eval_run_for(job=job)
    if run is None:
        raise Http404("this job has no evaluation to change the prompt of")
    start = selectors.prompt_change_start(run=run)
    initial = {"system_preamble": start.preamble, "tool_descriptions": json.dumps(start.shown, indent=2)}
    form = PromptChangeForm(request.POST or None, initial=initial, current=start.current)
    if request.method == "POST" and form.is_valid():
        try:
            changed = services.job_launch(
                actor=request.user, kind=JobKind.EVAL, snapshot=run.snapshot, base_model=job.base_model,
                adapter=job.adapter, agent=job.agent, hyperparameters={**job.hyperparameters, **form.prompt_settings()},
            )  # fmt: skip
        except services.LaunchRefused as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("training:job_detail", job_id=changed.id)
    context = {"job": job, "run": run, "form": form, "start": start}
    return render(request, "training/prompt_change.html", context, status=400 if form.errors else 200)


@permission_required(Perm.VIEW)
def sample_episode(request: AuthedRequest, job_id: UUID, sample_id: int) -> HttpResponse:
    """One sampled training (or evaluation) episode in the trace viewer."""
    job = _job(request, job_id)
    try:
        episode = selectors.sample_episode(job=job, sample_id=sample_id)
    except RecordError as exc:
        raise Http404(f"the episode cannot be shown: {exc}") from exc
    if episode is None:
        raise Http404("this job has no such sampled episode")
    return render(request, "training/sample_episode.html", {"job": job, "episode": episode})


@permission_required(Perm.VIEW)
def eval_episode(request: AuthedRequest, job_id: UUID, index: int) -> HttpResponse:
    """One evaluated episode (the `index`th per-task result) in the trace viewer."""
    job = _job(request, job_id)
    run = selectors.eval_run_for(job=job)
    try:
        episode = selectors.eval_episode(run=run, index=index) if run is not None else None
    except RecordError as exc:
        raise Http404(f"the episode cannot be shown: {exc}") from exc
    if episode is None:
        raise Http404("this evaluation has no such episode")
    return render(request, "training/eval_episode.html", {"job": job, "run": run, "episode": episode})


METHOD_LABELS = {PROMPT: "a prompt change", SFT: "SFT", DPO: "DPO", GRPO: "GRPO", NONE: "no change"}


@dataclass(frozen=True)
class OptionView:
    """One recommended fix as the page shows it: its words, and where its button leads (None: no button)."""

    option: Option
    label: str
    launch_url: str | None


def recommendation_options(recommendation: Recommendation, run: EvalRun) -> list[OptionView]:
    return [OptionView(option, METHOD_LABELS.get(option.method, option.method), option_launch_url(run, option.method))
            for option in recommendation.options]  # fmt: skip


def option_launch_url(run: EvalRun, method: str) -> str | None:
    """The launch form pre-filled for a recommended training method on the evaluated model and agent (a prompt
    change: its own form).

    A baseline is usually measured on held-out tasks, which may never be trained on: that
    snapshot becomes the run's held-out snapshot, and the agent's newest train snapshot its
    training data (of preference pairs for dpo; the person can pick another before launching).
    """
    if method == PROMPT:
        return reverse("training:prompt_change", kwargs={"job_id": run.job_id})
    if method not in HELDOUT_KINDS:
        return None
    job = run.job
    params = {"kind": method, "base_model": job.base_model, "adapter": job.adapter,
              "agent": job.agent_id or run.snapshot.agent_id}  # fmt: skip
    kind = SnapshotKind.PAIRS if method == DPO else SnapshotKind.TASKS
    if run.snapshot.split == Split.TRAIN and kind == run.snapshot.kind:
        params["snapshot"] = run.snapshot.pk
    elif run.snapshot.split == Split.HELDOUT:
        params["heldout_snapshot"] = run.snapshot.pk
    if "snapshot" not in params:
        train = selectors.latest_train_snapshot(agent=run.snapshot.agent, kind=kind)
        params["snapshot"] = train.pk if train else None
    return launch_url(params)


# --- API --------------------------------------------------------------------------------------


@permission_required(Perm.LAUNCH_JOBS, api=True)
@require_POST
def api_jobs(request: AuthedRequest) -> JsonResponse:
    """Launch a job: {"kind", "snapshot" (id or content hash), "base_model", "adapter"?, "hyperparameters"?,
    "heldout_snapshot"? (id or content hash; sft and grpo evaluate on it as they train)}."""
    try:
        body = json_object_from_body(request, max_bytes=settings.API_MAX_BODY_BYTES)
    except JsonInputError as exc:
        return JsonResponse({"error": exc.message}, status=exc.status)
    if problem := _job_body_problem(body):
        return JsonResponse({"error": problem}, status=400)
    snapshot = _snapshot(body.get("snapshot"), request.user)
    if snapshot is None:
        reference = body.get("snapshot")
        return JsonResponse({"error": f"no snapshot {reference!r} (give its id or content hash)"}, status=400)
    heldout = _snapshot(body["heldout_snapshot"], request.user) if body.get("heldout_snapshot") else None
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
    body = {"id": str(job.id), "state": job.state, "snapshot": snapshot.content_hash,
            "heldout_snapshot": heldout.content_hash if heldout else None}  # fmt: skip
    return JsonResponse(body, status=201)


JOB_BODY_TYPES: dict[str, tuple[type, ...]] = {
    "kind": (str,), "base_model": (str,), "adapter": (str, type(None)), "snapshot": (str, type(None)),
    "heldout_snapshot": (str, type(None)), "hyperparameters": (dict, type(None)),
}  # fmt: skip


def _job_body_problem(body: dict[str, Any]) -> str | None:
    """The first field of a launch request with the wrong JSON type, named; None when all fit."""
    for name, types in JOB_BODY_TYPES.items():
        if name in body and not isinstance(body[name], types):
            return f"'{name}' must be {'an object' if dict in types else 'a string'}, not {type(body[name]).__name__}"
    return None


def _snapshot(reference: object, viewer: User) -> TaskSetSnapshot | None:
    """A snapshot of the viewer's agents by content hash or id; anything else (a malformed id included) finds none."""
    text = str(reference or "")
    snapshots = snapshot_list(viewer=viewer)
    snapshot = snapshots.filter(content_hash=text).first()
    if snapshot is None:
        try:
            snapshot = snapshots.filter(pk=UUID(text)).first()
        except ValueError:
            return None
    return snapshot
