"""Pages of the rewards app: runs, a new run, a run's profile with marks, re-verify, comparison, the judge,
and an agent's bucket judgings (the judge as a bucket suggester).

Viewing needs Perm.VIEW. Creating and re-verifying runs, marking scores and launching the judge
need Perm.LAUNCH_JOBS: profiling a reward is the trainer's check before a training job, and the
permission matrix gives each endpoint one permission.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from uuid import UUID

from django.contrib import messages
from django.core.files.uploadedfile import UploadedFile
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from flywheel.core.access import AuthedRequest, agent_get_or_404, permission_required
from flywheel.core.charts import figure_html
from flywheel.core.roles import Perm
from flywheel.core.selectors import choices_limit
from flywheel.core.templatetags.flywheel import pretty_json
from flywheel.datasets.selectors import snapshot_get
from flywheel.rewards import buckets, charts, selectors, services
from flywheel.rewards.forms import MarkForm, ProfileRunForm, ScoringForm
from flywheel.rewards.models import OutputSource, ProfiledOutput, ProfileRun

RUNS_SHOWN = 200


def _lines(upload: UploadedFile | None) -> Iterator[str]:
    if upload is None:
        return iter(())
    upload.seek(0)
    return io.TextIOWrapper(upload, encoding="utf-8", errors="replace")  # type: ignore[arg-type]


@permission_required(Perm.VIEW)
def run_list(request: AuthedRequest) -> HttpResponse:
    return render(request, "rewards/run_list.html", {"runs": selectors.run_list(viewer=request.user)[:RUNS_SHOWN]})


def _new_initial(request: AuthedRequest) -> dict[str, object]:
    snapshot_id = _uuid_or_none(request.GET.get("snapshot", ""))
    snapshot = snapshot_get(snapshot_id=snapshot_id, viewer=request.user) if snapshot_id else None
    policy = selectors.default_policy(agent_id=snapshot.agent_id if snapshot else None)
    return {"snapshot": snapshot, "policy": pretty_json(policy)}


@permission_required(Perm.LAUNCH_JOBS)
def run_new(request: AuthedRequest) -> HttpResponse:
    form = ProfileRunForm(request.POST or None, request.FILES or None, initial=_new_initial(request))
    choices_limit(form, viewer=request.user)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        upload = data["outputs"] if data["source_kind"] == OutputSource.UPLOAD else None
        try:
            run = services.profile_create(
                actor=request.user, snapshot=data["snapshot"], scoring=form.scoring(),
                source_kind=data["source_kind"], sample_size=data["sample_size"], seed=data["seed"],
                lines=_lines(upload), evaluation=data["evaluation"], source_name=upload.name if upload else "",
                note=data["note"],
            )  # fmt: skip
        except services.ProfileRefused as error:
            form.add_error(None, str(error))
        else:
            return redirect("rewards:run_detail", run_id=run.id)
    return render(request, "rewards/run_new.html", {"form": form})


def _run(request: AuthedRequest, run_id: UUID) -> ProfileRun:
    """The run, if its snapshot's agent is one the user may see; 404 alike for no such run and another's."""
    run = selectors.run_get(run_id=run_id, viewer=request.user)
    if run is None:
        raise Http404("no such run")
    return run


@permission_required(Perm.VIEW)
def run_detail(request: AuthedRequest, run_id: UUID) -> HttpResponse:
    run = _run(request, run_id)
    profile = selectors.run_profile(run=run)
    context = {
        "run": run,
        "summary": profile.summary,
        "agreement": selectors.agreement(run=run),
        "rows": selectors.output_rows(run=run, user=request.user),
        "family": selectors.run_family(run=run),
        "histogram": figure_html(charts.reward_histogram(profile.rewards)),
        "components_chart": figure_html(charts.components_chart(profile.components)),
        "components": profile.components,
        "can_mark": request.user.has_perm(Perm.LAUNCH_JOBS),
    }
    return render(request, "rewards/run_detail.html", context)


@permission_required(Perm.LAUNCH_JOBS)
@require_POST
def output_mark(request: AuthedRequest, run_id: UUID, output_id: int) -> HttpResponse:
    output = get_object_or_404(ProfiledOutput.objects.select_related("run"), pk=output_id, run=_run(request, run_id))
    form = MarkForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest("a mark is agree or disagree, with an optional note")
    services.mark_set(
        actor=request.user, output=output, verdict=form.cleaned_data["verdict"], note=form.cleaned_data["note"]
    )
    if not request.headers.get("HX-Request"):
        return redirect(reverse("rewards:run_detail", args=[run_id]) + f"#output-{output_id}")
    row = selectors.output_row(output_id=output_id, user=request.user)
    context = {
        "run": output.run, "output": row.output, "my_mark": row.mine, "can_mark": True, "oob": True,
        "agreement": selectors.agreement(run=output.run),
    }  # fmt: skip
    return render(request, "rewards/_mark_response.html", context)


@permission_required(Perm.LAUNCH_JOBS)
def run_reverify(request: AuthedRequest, run_id: UUID) -> HttpResponse:
    run = _run(request, run_id)
    initial = {"verifier": run.verifier, "environment": run.environment, "policy": pretty_json(run.policy)}
    form = ScoringForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            child = services.reverify(
                actor=request.user, run=run, scoring=form.scoring(), note=form.cleaned_data["note"]
            )
        except services.ProfileRefused as error:
            form.add_error(None, str(error))
        else:
            return redirect("rewards:run_compare", run_id=child.id)
    return render(request, "rewards/run_reverify.html", {"run": run, "form": form})


@permission_required(Perm.VIEW)
def run_compare(request: AuthedRequest, run_id: UUID) -> HttpResponse:
    other = _run(request, run_id)
    base_id = _uuid_or_none(request.GET["base"]) if request.GET.get("base") else other.parent_id
    base = selectors.run_get(run_id=base_id, viewer=request.user) if base_id else None
    if base is None:
        raise Http404("no run to compare with: this run has no parent and ?base= names no run")
    try:
        comparison = selectors.run_comparison(base=base, other=other)
    except selectors.NotComparable as error:
        return HttpResponseBadRequest(str(error))
    figure = charts.comparison_histogram(
        [row.base.reward for row in comparison.rows], [row.other.reward for row in comparison.rows],
        (f"before: {base}", f"after: {other}"),
    )  # fmt: skip
    context = {
        "comparison": comparison, "family": selectors.run_family(run=other), "chart": figure_html(figure),
        "before": selectors.run_summary(run=base), "after": selectors.run_summary(run=other),
    }  # fmt: skip
    return render(request, "rewards/run_compare.html", context)


@permission_required(Perm.VIEW)
def run_judge(request: AuthedRequest, run_id: UUID) -> HttpResponse:
    """The judge's agreement with the reviewers' labels of this run, its disagreements, and whether it is approved."""
    run = _run(request, run_id)
    agent = run.snapshot.agent
    context = {
        "run": run, "report": selectors.judge_report(run=run), "min_labels": selectors.MIN_LABELS,
        "judge": selectors.judge_settings(agent=agent) if agent else None,
        "approval": selectors.judge_approval(agent=agent) if agent else None,
        "can_launch": request.user.has_perm(Perm.LAUNCH_JOBS), "error": "",
    }  # fmt: skip
    return render(request, "rewards/run_judge.html", context)


@permission_required(Perm.LAUNCH_JOBS)
@require_POST
def run_judge_launch(request: AuthedRequest, run_id: UUID) -> HttpResponse:
    run = _run(request, run_id)
    try:
        services.judge_run_launch(actor=request.user, run=run)
    except services.ProfileRefused as error:
        context = {"run": run, "report": selectors.judge_report(run=run), "min_labels": selectors.MIN_LABELS,
                   "judge": None, "approval": None, "can_launch": True, "error": str(error)}  # fmt: skip
        return render(request, "rewards/run_judge.html", context, status=400)
    return redirect("rewards:run_judge", run_id=run.id)


@permission_required(Perm.VIEW)
def judge_buckets(request: AuthedRequest, agent_name: str) -> HttpResponse:
    """The agent's bucket judgings, newest first, each with what it suggested."""
    agent = agent_get_or_404(viewer=request.user, name=agent_name)
    context = {
        "agent": agent, "rows": selectors.bucket_judging_list(viewer=request.user, agent=agent),
        "shown": selectors.JUDGINGS_SHOWN, "can_launch": request.user.has_perm(Perm.LAUNCH_JOBS),
    }  # fmt: skip
    return render(request, "rewards/judge_buckets.html", context)


@permission_required(Perm.LAUNCH_JOBS)
@require_POST
def judge_buckets_launch(request: AuthedRequest, agent_name: str) -> HttpResponse:
    """Have the agent's judge suggest wrong tool / bad planning / retrieval failure for its failures awaiting review."""
    agent = agent_get_or_404(viewer=request.user, name=agent_name)
    try:
        judgings = buckets.bucket_judging_launch(actor=request.user, agent=agent)
    except buckets.BucketJudgingRefused as error:
        messages.error(request, str(error))
    else:
        count = len(judgings[0].trajectory_ids)
        messages.success(request, f"The judge will look at {count} failed trajectories of {agent.name} in "
                                  f"{len(judgings)} jobs; its suggestions appear here when they finish.")  # fmt: skip
    return redirect(f"{reverse('triage:trajectory_list')}?agent={agent.name}")


def _uuid_or_none(text: str) -> UUID | None:
    try:
        return UUID(text)
    except ValueError:
        return None
