"""Pages and APIs of the registry: versions, gates, promote and roll back, replays of failing steps, the live
API, chat completions.

Views parse, call one service or selector, and render. Every change goes through `services`;
the forms carry the live version the page showed, so a stale page is refused, not applied.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.forms import Form
from django.http import FileResponse, Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from flywheel.core.access import AuthedRequest, agent_get_or_404, permission_required, rate_limited
from flywheel.core.charts import figure_html
from flywheel.core.jsonbody import JsonInputError, json_object_from_body
from flywheel.core.models import Agent, AuditEvent
from flywheel.core.roles import Perm
from flywheel.core.selectors import choices_limit
from flywheel.ingest.models import Trajectory
from flywheel.ingest.selectors import trajectory_visible
from flywheel.ingest.trace import trace_steps
from flywheel.registry import charts, guardrails, selectors, services, serving, storage, traffic
from flywheel.registry.forms import (
    GateLaunchForm,
    GatePolicyForm,
    PromoteForm,
    ReplayForm,
    RollbackForm,
    expected_live_value,
    expected_live_version,
)
from flywheel.registry.models import ModelVersion
from flywheel.training.forms import launch_url
from flywheel.training.models import EvalRun, JobKind
from flywheel.training.selectors import eval_run_for, job_get


def _form_errors(form: Form) -> str:
    return "; ".join(f"{name}: {' '.join(str(error) for error in errors)}" for name, errors in form.errors.items())


def _version(request: AuthedRequest, agent_name: str, number: int) -> ModelVersion:
    version = selectors.version_get(agent_name=agent_name, number=number, viewer=request.user)
    if version is None:
        raise Http404(f"no version {agent_name}:v{number}")
    return version


@permission_required(Perm.VIEW)
def version_list(request: AuthedRequest) -> HttpResponse:
    agents = selectors.agent_list_with_versions(viewer=request.user)
    return render(request, "registry/version_list.html", {"agents": agents})


@permission_required(Perm.VIEW)
def agent_versions(request: AuthedRequest, agent_name: str) -> HttpResponse:
    agent = agent_get_or_404(viewer=request.user, name=agent_name)
    live = selectors.live_version(agent=agent)
    failures = selectors.failures_by_version(agent=agent)
    context: dict[str, Any] = {
        "agent": agent, "live": live, "versions": selectors.version_list(agent=agent),
        "history": selectors.deployment_history(agent=agent), "policy": selectors.gate_policy(agent=agent),
        "failures": failures, "failures_chart": figure_html(charts.failures_figure(failures)) if failures else None,
        "audit": _audit(request, agent),
    }  # fmt: skip
    if live is not None and request.user.has_perm(Perm.APPROVE_VERSIONS):
        earlier = selectors.earlier_versions(agent=agent, current=live)
        previous = selectors.previous_version(agent=agent, current=live)
        context["rollback_form"] = RollbackForm(choices=earlier, initial={
            "to_version": previous, "expected_live": expected_live_value(live)}) if earlier.exists() else None
    if request.user.has_perm(Perm.MANAGE):
        context["policy_form"] = GatePolicyForm.for_policy(context["policy"])
    return render(request, "registry/agent_versions.html", context)


def _audit(request: AuthedRequest, agent: Agent) -> list[AuditEvent] | None:
    if not request.user.has_perm(Perm.VIEW_AUDIT):
        return None
    return list(selectors.audit_trail(agent=agent)[:100])


@permission_required(Perm.VIEW)
def version_detail(request: AuthedRequest, agent_name: str, number: int) -> HttpResponse:
    version = _version(request, agent_name, number)
    live = selectors.live_version(agent=version.agent)
    gate = selectors.gate_for_promotion(version=version, baseline=live)
    context = {
        "version": version, "live": live, "lineage": selectors.lineage(version=version),
        "gates": selectors.gate_results(version=version), "promotion_gate": gate,
        "vllm_command": selectors.vllm_command(version=version),
        "location": selectors.adapter_location(version=version),
        "train_further_url": _train_further_url(version),
        "promote_form": PromoteForm(initial={"expected_live": expected_live_value(live)}),
        "gate_form": choices_limit(GateLaunchForm(initial={"heldout_snapshot": _heldout_of(version)}),
                                   viewer=request.user),
    }  # fmt: skip
    return render(request, "registry/version_detail.html", context)


def _train_further_url(version: ModelVersion) -> str:
    """The launch form, filled in to train this version's adapter further (GRPO, the guide's next step)."""
    fields = {"kind": JobKind.GRPO, "base_model": version.base_model, "agent": version.agent_id,
              "adapter": selectors.adapter_location(version=version)}  # fmt: skip
    job = version.training_job
    if job is not None:
        fields |= {"snapshot": job.snapshot_id, "heldout_snapshot": job.heldout_snapshot_id}
    return launch_url(fields)


def _heldout_of(version: ModelVersion) -> Any:
    job = version.training_job
    return job.heldout_snapshot_id if job is not None else None


@permission_required(Perm.VIEW)
def version_download(request: AuthedRequest, agent_name: str, number: int) -> FileResponse:
    version = _version(request, agent_name, number)
    try:
        folder = selectors.adapter_folder(version=version)
    except storage.AdapterTampered as error:
        raise Http404(f"the adapter failed verification: {error}") from None
    name = version.serve_name
    return FileResponse(storage.zip_adapter(folder, name), as_attachment=True, filename=f"{name}.zip",
                        content_type="application/zip")  # fmt: skip


@permission_required(Perm.APPROVE_VERSIONS)
@require_POST
def version_promote(request: AuthedRequest, agent_name: str, number: int) -> HttpResponse:
    version = _version(request, agent_name, number)
    form = PromoteForm(request.POST)
    if not form.is_valid():
        messages.error(request, "The promote form was incomplete.")
        return redirect("registry:version_detail", agent_name=agent_name, number=number)
    try:
        deployment = services.version_promote(
            actor=request.user, version=version, reason=form.cleaned_data["reason"],
            expected_live=expected_live_version(form.cleaned_data["expected_live"]),
        )  # fmt: skip
    except services.RegistryRefused as error:
        messages.error(request, str(error))
        return redirect("registry:version_detail", agent_name=agent_name, number=number)
    messages.success(request, f"{version.tag} is live." if deployment else f"{version.tag} was live already.")
    return redirect("registry:agent_versions", agent_name=agent_name)


@permission_required(Perm.APPROVE_VERSIONS)
@require_POST
def agent_rollback(request: AuthedRequest, agent_name: str) -> HttpResponse:
    agent = agent_get_or_404(viewer=request.user, name=agent_name)
    form = RollbackForm(request.POST, choices=ModelVersion.objects.filter(agent=agent))
    if not form.is_valid():
        messages.error(request, "A rollback needs the version to return to and a written reason.")
        return redirect("registry:agent_versions", agent_name=agent_name)
    try:
        deployment = services.version_rollback(
            actor=request.user, agent=agent, reason=form.cleaned_data["reason"],
            to_version=form.cleaned_data["to_version"],
            expected_live=expected_live_version(form.cleaned_data["expected_live"]),
        )  # fmt: skip
    except services.RegistryRefused as error:
        messages.error(request, str(error))
    else:
        target = form.cleaned_data["to_version"]
        messages.success(request, f"Rolled back to {target.tag}." if deployment else f"{target.tag} was live already.")
    return redirect("registry:agent_versions", agent_name=agent_name)


@permission_required(Perm.LAUNCH_JOBS)
@require_POST
def gate_launch(request: AuthedRequest, agent_name: str, number: int) -> HttpResponse:
    version = _version(request, agent_name, number)
    form = choices_limit(GateLaunchForm(request.POST), viewer=request.user)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return redirect("registry:version_detail", agent_name=agent_name, number=number)
    try:
        gate = services.gate_launch(
            actor=request.user, candidate=version, heldout_snapshot=form.cleaned_data["heldout_snapshot"],
            regression_snapshot=form.cleaned_data["regression_snapshot"], options=form.cleaned_data["options"],
        )  # fmt: skip
    except services.RegistryRefused as error:
        messages.error(request, str(error))
        return redirect("registry:version_detail", agent_name=agent_name, number=number)
    return redirect("training:job_detail", job_id=gate.job_id)


@permission_required(Perm.MANAGE)
@require_POST
def gate_policy_update(request: AuthedRequest, agent_name: str) -> HttpResponse:
    agent = agent_get_or_404(viewer=request.user, name=agent_name)
    form = GatePolicyForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return redirect("registry:agent_versions", agent_name=agent_name)
    try:
        services.gate_policy_set(actor=request.user, agent=agent, policy=form.cleaned_data)
    except services.RegistryRefused as error:
        messages.error(request, str(error))
    else:
        messages.success(request, "Gate policy saved; it applies to the next gate.")
    return redirect("registry:agent_versions", agent_name=agent_name)


@permission_required(Perm.VIEW)
def gate_detail(request: AuthedRequest, gate_id: UUID) -> HttpResponse:
    gate = selectors.gate_result_get(gate_id=gate_id, viewer=request.user)
    if gate is None:
        raise Http404("no such gate")
    comparison = selectors.comparison(gate=gate)
    context = {
        "gate": gate, "comparison": comparison,
        "rates_chart": figure_html(charts.rates_figure(comparison.overall)),
        "bucket_chart": figure_html(charts.bucket_figure(comparison.by_bucket)) if comparison.by_bucket else None,
        "reward_chart": figure_html(charts.reward_figure(comparison.reward_curves)) if comparison.reward_curves
        else None,
    }  # fmt: skip
    return render(request, "registry/gate_detail.html", context)


@permission_required(Perm.VIEW)
def eval_compare(request: AuthedRequest, baseline_job_id: UUID, candidate_job_id: UUID) -> HttpResponse:
    """Two evaluations of one snapshot (a prompt change against its baseline) in the gate's paired view."""
    baseline, candidate = _eval_run(request, baseline_job_id), _eval_run(request, candidate_job_id)
    try:
        paired = selectors.eval_comparison(baseline=baseline, candidate=candidate)
    except selectors.NotComparable as error:
        context = {"baseline": baseline, "candidate": candidate, "problem": str(error)}
        return render(request, "registry/eval_compare.html", context, status=400)
    view = paired.view
    context = {
        "baseline": baseline, "candidate": candidate, "paired": paired, "comparison": view,
        "rates_chart": figure_html(charts.rates_figure(view.overall)),
        "bucket_chart": figure_html(charts.bucket_figure(view.by_bucket)) if view.by_bucket else None,
    }  # fmt: skip
    return render(request, "registry/eval_compare.html", context)


def _eval_run(request: AuthedRequest, job_id: UUID) -> EvalRun:
    """The evaluation of a job the user may see; 404 alike for no such job, another agent's, and no results."""
    job = job_get(job_id=job_id, viewer=request.user)
    run = eval_run_for(job=job) if job is not None else None
    if run is None:
        raise Http404("no such evaluation")
    return run


# --- Replays of failing steps ------------------------------------------------------------------


def _trajectory(request: AuthedRequest, trajectory_id: UUID) -> Trajectory:
    """The trajectory, if the user may see it; 404 alike for none and another agent's."""
    trajectory = trajectory_visible(viewer=request.user).select_related("agent").filter(pk=trajectory_id).first()
    if trajectory is None:
        raise Http404("no such trajectory")
    return trajectory


def _replays_context(request: AuthedRequest, trajectory: Trajectory, form: ReplayForm | None = None) -> dict[str, Any]:
    versions = selectors.version_list(agent=trajectory.agent)
    live = selectors.live_version(agent=trajectory.agent)
    if form is None and selectors.can_replay(request.user) and versions.exists():
        form = ReplayForm(versions=versions, initial={"version": live or versions.first()})
    groups = selectors.replay_groups(trajectory=trajectory, viewer=request.user)
    return {"trajectory": trajectory, "groups": groups, "form": form, "live": live,
            "checks": selectors.REPLAY_CHECKS, "polling": any(group.pending for group in groups)}  # fmt: skip


@permission_required(Perm.VIEW)
def trajectory_replays(request: AuthedRequest, trajectory_id: UUID) -> HttpResponse:
    """The trace viewer's replay panel (loaded and polled by htmx): the form, and each step's answers side by side."""
    trajectory = _trajectory(request, trajectory_id)
    return render(request, "registry/_replays.html", _replays_context(request, trajectory))


@permission_required(Perm.VIEW)
@require_POST
def replay_launch(request: AuthedRequest, trajectory_id: UUID) -> HttpResponse:
    """Launch a replay (trainers and approvers; `services.replay_launch` checks), then show the panel again."""
    trajectory = _trajectory(request, trajectory_id)
    if not selectors.can_replay(request.user):
        raise PermissionDenied("replaying needs the trainer's or the approver's permission")
    form = ReplayForm(request.POST, versions=selectors.version_list(agent=trajectory.agent))
    if form.is_valid():
        try:
            services.replay_launch(actor=request.user, trajectory=trajectory, version=form.cleaned_data["version"],
                                   step_index=form.cleaned_data["step"], options=form.cleaned_data["options"])
        except services.RegistryRefused as error:
            form.add_error(None, str(error))
    if form.errors:
        return render(request, "registry/_replays.html", _replays_context(request, trajectory, form), status=400)
    if request.headers.get("HX-Request"):
        return render(request, "registry/_replays.html", _replays_context(request, trajectory))
    return redirect(reverse("ingest:trajectory_detail", args=[trajectory.pk]) + "#replays")


@permission_required(Perm.VIEW)
def replay_detail(request: AuthedRequest, replay_id: UUID) -> HttpResponse:
    """One replay: the conversation it answered, the recorded answer beside the version's, and their checks."""
    replay = selectors.replay_get(replay_id=replay_id, viewer=request.user)
    if replay is None:
        raise Http404("no such replay")
    context = {"replay": replay, "case": replay.case, "rows": selectors.replay_rows(replay=replay),
               "context_steps": trace_steps(replay.case.get("messages") or [])}  # fmt: skip
    return render(request, "registry/replay_detail.html", context)


# --- APIs -----------------------------------------------------------------------------------


@permission_required(Perm.VIEW, api=True)
def api_live(request: AuthedRequest, agent_name: str) -> JsonResponse:
    """`GET /api/v1/agents/<agent>/live`: the live version, its base model, adapter location and sha256."""
    pointer = selectors.live_pointer_for(agent_name=agent_name, viewer=request.user)
    if pointer is None:
        return JsonResponse({"error": f"agent {agent_name!r} has no live version"}, status=404)
    return JsonResponse(selectors.live_info(pointer=pointer))


def _openai_error(status: int, message: str, kind: str = "invalid_request_error") -> JsonResponse:
    return JsonResponse({"error": {"message": message, "type": kind, "param": None, "code": None}}, status=status)


@permission_required(Perm.VIEW, api=True)
@rate_limited("chat", error=partial(_openai_error, kind="rate_limit_exceeded"))
@require_POST
def chat_completions(request: AuthedRequest) -> HttpResponse | StreamingHttpResponse:
    """`POST /v1/chat/completions`: OpenAI's chat API; `model` names the agent, the live version answers.

    With `stream: true` the server's events pass through as they come (vLLM streams; `python -m
    trainer serve` refuses, and its refusal is answered as JSON), tool calls held back until the
    guardrails have judged them. The agent's guardrails (`guardrails`) judge every returned tool
    call: a blocked one reaches the client as a refusal. Each answered request, once its answer has
    gone out, is handed to a task that records it, as the server answered it, as a trajectory
    (`services.served_record_later`); refusals are not.
    """
    started = time.monotonic()
    try:
        body = json_object_from_body(request, max_bytes=settings.API_MAX_BODY_BYTES)
    except JsonInputError as exc:
        return _openai_error(exc.status, exc.message)
    if not isinstance(body.get("model"), str):
        return _openai_error(400, "'model' must name the agent (or its live version tag, e.g. support-bot:v3)")
    if not isinstance(body.get("messages"), list) or not all(isinstance(m, dict) for m in body["messages"]):
        return _openai_error(400, "'messages' must be a list of message objects")
    agent_name, _, pinned = body["model"].partition(":")
    pointer = selectors.live_pointer_for(agent_name=agent_name, viewer=request.user)
    if pointer is None:
        return _openai_error(404, f"agent {agent_name!r} has no live version", "model_not_found")
    if pinned and body["model"] != pointer.version.tag:
        return _openai_error(409, f"only the live version {pointer.version.tag} is served", "model_not_live")
    try:
        if body.get("stream") is True:
            events = serving.chat_stream(version=pointer.version, body=body)
            record = partial(services.served_record_later, version=pointer.version, body=body, started=started)
            rails = selectors.guardrails_for(agent=pointer.agent)
            guard = None if rails.off else guardrails.StreamGuard(rails, guardrails.history_of(body["messages"]))
            events = traffic.recorded_stream(events, on_end=record, guard=guard)
            return StreamingHttpResponse(events, content_type="text/event-stream",
                                         headers={"Cache-Control": "no-cache"})  # fmt: skip
        status, answer = serving.chat_forward(version=pointer.version, body=body)
    except serving.UpstreamRefused as refused:
        return JsonResponse(refused.answer, status=refused.status)
    except storage.AdapterTampered as error:
        return _openai_error(503, f"the live adapter failed verification: {error}", "adapter_invalid")
    except serving.ServingUnavailable as error:
        unavailable = _openai_error(503, str(error), "serving_unavailable")
        if error.retry_after is not None:
            unavailable["Retry-After"] = str(error.retry_after)
        return unavailable
    if status != 200:
        return JsonResponse(answer, status=status)
    verdict = guardrails.check_answer(selectors.guardrails_for(agent=pointer.agent), body["messages"], answer)
    record = partial(services.served_record_later, version=pointer.version, body=body, answer=answer,
                     started=started, verdict=verdict, finished=time.monotonic())  # fmt: skip
    return _RecordedAfterwards(guardrails.guarded_answer(answer, verdict), after=record)


class _RecordedAfterwards(JsonResponse):
    """A JSON answer whose recording runs once the server has sent it, so the client never waits for the write.

    The WSGI server calls `close()` after it has written the body (Content-Length is set, so the
    client has the whole answer by then); the recording then holds this worker thread for its
    outbox row and broker message, not the client. A streamed answer is recorded after its last
    chunk in the same way (`traffic.recorded_stream`).
    """

    def __init__(self, data: dict[str, Any], *, after: Callable[[], object]) -> None:
        super().__init__(data)
        self._after = after

    def close(self) -> None:
        try:
            self._after()  # never raises (`services.served_record_later`)
        finally:
            super().close()  # after the recording: it closes this thread's database connection
