"""Pages of the datasets app: tasks (list, detail, edit with history), split breakdown, preference pairs and their
exports (with the corrections'), snapshots, synthetic batches (preview, bulk accept); and the pairs and
corrections APIs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any
from uuid import UUID

from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from flywheel.core.access import AuthedRequest, permission_required
from flywheel.core.models import Agent
from flywheel.core.roles import Perm
from flywheel.core.selectors import agent_get, choices_limit, sees_all_agents
from flywheel.core.services import audit_record
from flywheel.core.templatetags.flywheel import pretty_json
from flywheel.datasets import selectors, services
from flywheel.datasets.conversion import environment_column, episode_draft, step_source_ref, task_draft
from flywheel.datasets.exports import EXPORT_FORMATS, snapshot_file_name, snapshot_lines
from flywheel.datasets.forms import (
    PairFilterForm,
    PairSnapshotForm,
    SnapshotForm,
    SyntheticBatchForm,
    TaskEditForm,
    TaskFilterForm,
    TaskWriteForm,
)
from flywheel.datasets.models import (
    Environment,
    PreferencePair,
    RegressionTask,
    SnapshotKind,
    SourceKind,
    SyntheticBatch,
    TaskSetSnapshot,
)
from flywheel.datasets.pairs import pair_line, pairs_file_name
from flywheel.ingest.selectors import trajectory_visible
from flywheel.triage.selectors import correction_line, correction_visible

PAGE_SIZE = 50
EPISODE_MODE = "episode"


@permission_required(Perm.VIEW)
def task_list(request: AuthedRequest) -> HttpResponse:
    form = TaskFilterForm(request.GET)
    tasks = selectors.task_list(filters=form.filters(), viewer=request.user)
    page = Paginator(tasks, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "form": form,
        "page": page,
        "query": query.urlencode(),
        "breakdown": selectors.split_breakdown(tasks=tasks),
    }
    return render(request, "datasets/task_list.html", context)


def _task(request: AuthedRequest, task_id: UUID) -> RegressionTask:
    task = selectors.task_get(task_id=task_id, viewer=request.user)
    if task is None:
        raise Http404("no such task")
    return task


def _snapshot(request: AuthedRequest, snapshot_id: UUID) -> TaskSetSnapshot:
    snapshot = selectors.snapshot_get(snapshot_id=snapshot_id, viewer=request.user)
    if snapshot is None:
        raise Http404("no such snapshot")
    return snapshot


@permission_required(Perm.VIEW)
def task_detail(request: AuthedRequest, task_id: UUID) -> HttpResponse:
    task = _task(request, task_id)
    context = {"task": task, "revisions": selectors.task_revisions(task=task),
               "duplicate_of": selectors.task_duplicate_of(task=task, viewer=request.user),
               "message_steps": selectors.task_message_steps(task=task),
               "episode": selectors.task_episode(task=task)}  # fmt: skip
    return render(request, "datasets/task_detail.html", context)


@permission_required(Perm.EDIT_TASKS)
def task_edit(request: AuthedRequest, task_id: UUID) -> HttpResponse:
    task = _task(request, task_id)
    initial = {
        "split": task.split,
        "messages": pretty_json(task.content["messages"]),
        "expected_calls": pretty_json(task.content["expected_calls"]),
        "no_call_expected": task.content["no_call_expected"],
        "order_sensitive": task.content["order_sensitive"],
    }
    form = TaskEditForm(request.POST or None, initial=initial, base=task.content)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            services.task_update(
                actor=request.user, task=task, new=data["task"], split=data["split"], note=data["note"]
            )
        except services.TaskRefused as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("datasets:task_detail", task_id=task.id)
    return render(request, "datasets/task_edit.html", {"task": task, "form": form})


def _save_written(request: AuthedRequest, form: TaskWriteForm, agent: Agent | None, origin: services.TaskOrigin):
    """Create the task the form holds; the response to send, or None to show the form again."""
    if request.method != "POST" or not form.is_valid():
        return None
    data = form.cleaned_data
    origin = replace(origin, bucket_id=data["bucket"].id if data["bucket"] else None)
    try:
        task = services.task_create(
            actor=request.user, task=data["task"], split=data["split"], agent=agent, origin=origin
        )
    except services.TaskRefused as exc:
        form.add_error(None, str(exc))
        return None
    audit_record(actor=request.user, action="task.create", target=task, data={"source": origin.source_kind})
    return redirect("datasets:task_detail", task_id=task.id)


@permission_required(Perm.EDIT_TASKS)
def task_new(request: AuthedRequest) -> HttpResponse:
    if not sees_all_agents(request.user):
        # A task written here belongs to no agent, and such rows are for all-agents users only.
        raise PermissionDenied("a task of no agent needs access to every agent; write it from a trajectory")
    form = TaskWriteForm(
        request.POST or None, initial={"messages": pretty_json([{"role": "user", "content": ""}]), "tools": "[]"}
    )
    saved = _save_written(request, form, None, services.TaskOrigin(source_kind=SourceKind.MANUAL))
    return saved or render(request, "datasets/task_new.html", {"form": form})


def _digits(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


@permission_required(Perm.EDIT_TASKS)
def task_from_trajectory(request: AuthedRequest, trajectory_id: UUID) -> HttpResponse:
    """Draft a next-call task at a step (`?step=N`) or, with `?mode=episode`, an episode from a user turn (`start`)."""
    trajectory = get_object_or_404(trajectory_visible(viewer=request.user).select_related("agent"), pk=trajectory_id)
    step, episode_mode = _digits(request.GET.get("step")), request.GET.get("mode") == EPISODE_MODE
    try:
        draft = task_draft(trajectory=trajectory, step_index=step)
        start = _digits(request.GET.get("start"))
        episode = episode_draft(trajectory=trajectory, draft=draft, start=start) if episode_mode else None
    except ValueError as exc:
        raise Http404(str(exc)) from exc
    name = trajectory.external_id or trajectory.id
    initial = {
        "external_id": f"{name}@turn{episode.start_index}" if episode else f"{name}@step{draft.step_index}",
        "messages": pretty_json(episode.messages if episode else draft.messages),
        "tools": pretty_json(draft.tools),
        "expected_calls": pretty_json(episode.expected if episode else draft.expected_calls()),
    }
    form = TaskWriteForm(request.POST or None, initial=initial, episode=episode.episode if episode else None)
    origin = services.TaskOrigin(
        source_kind=SourceKind.TRAJECTORY, source_trajectory_id=trajectory.id,
        source_ref=f"episode from step {episode.start_index}" if episode else step_source_ref(draft.step_index),
        environment=environment_column(str(episode.episode.environment)) if episode else Environment.SINGLE_STEP,
    )  # fmt: skip
    saved = _save_written(request, form, trajectory.agent, origin)
    context = {
        "form": form,
        "trajectory": trajectory,
        "draft": draft,
        "episode": episode,
        "suggested": [pretty_json([c]) for c in draft.suggested_calls],
    }
    return saved or render(request, "datasets/task_from_trajectory.html", context)


@permission_required(Perm.VIEW)
def snapshot_list(request: AuthedRequest) -> HttpResponse:
    form = choices_limit(SnapshotForm(), viewer=request.user)
    context = {"snapshots": selectors.snapshot_list(viewer=request.user), "form": form}
    return render(request, "datasets/snapshot_list.html", context)


@permission_required(Perm.EDIT_TASKS)
def snapshot_new(request: AuthedRequest) -> HttpResponse:
    form = choices_limit(SnapshotForm(request.POST or None), viewer=request.user)
    every_agent = request.method == "POST" and form.is_valid() and form.cleaned_data["agent"] is None
    if every_agent and not sees_all_agents(request.user):
        form.add_error("agent", "Pick one of your agents: a snapshot of every agent needs access to every agent.")
    if request.method == "POST" and form.is_valid():
        try:
            snapshot = services.snapshot_create(actor=request.user, **form.cleaned_data)
        except services.TaskRefused as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("datasets:snapshot_detail", snapshot_id=snapshot.id)
    context = {"snapshots": selectors.snapshot_list(viewer=request.user), "form": form}
    return render(request, "datasets/snapshot_list.html", context)


def _jsonl(rows: Iterable[dict[str, Any]], filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(
        (json.dumps(row, ensure_ascii=False) + "\n" for row in rows), content_type="application/x-ndjson"
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _pairs_download(pairs: Iterable[PreferencePair], split: str) -> StreamingHttpResponse:
    return _jsonl((pair_line(pair) for pair in pairs), pairs_file_name(split) if split else "pairs.jsonl")


@permission_required(Perm.VIEW)
def pair_list(request: AuthedRequest) -> HttpResponse:
    form = PairFilterForm(request.GET)
    pairs = selectors.pair_list(filters=form.filters(), viewer=request.user)
    page = Paginator(pairs, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    snapshot_form = choices_limit(PairSnapshotForm(initial={"agent": _agent_id(request, form)}), viewer=request.user)
    context = {"form": form, "page": page, "query": query.urlencode(), "snapshot_form": snapshot_form,
               "snapshots": selectors.snapshot_list(viewer=request.user).filter(kind=SnapshotKind.PAIRS)}  # fmt: skip
    return render(request, "datasets/pair_list.html", context)


def _agent_id(request: AuthedRequest, form: PairFilterForm) -> object:
    agent = agent_get(viewer=request.user, name=form.filters().agent) if form.filters().agent else None
    return agent.pk if agent else None


@permission_required(Perm.VIEW)
def pair_export(request: AuthedRequest) -> StreamingHttpResponse:
    """The pairs the list's filter shows, one TRL preference line each (`pairs_<split>.jsonl` for one split)."""
    filters = PairFilterForm(request.GET).filters()
    return _pairs_download(selectors.pair_list(filters=filters, viewer=request.user).iterator(), filters.split)


@permission_required(Perm.VIEW)
def correction_export(request: AuthedRequest) -> StreamingHttpResponse:
    """Every correction the user may see (of one agent with `?agent=`), one JSON line each."""
    rows = correction_visible(viewer=request.user, agent_name=request.GET.get("agent", ""))
    return _jsonl((correction_line(row) for row in rows.iterator()), "corrections.jsonl")


@permission_required(Perm.EDIT_TASKS)
@require_POST
def pair_snapshot_new(request: AuthedRequest) -> HttpResponse:
    form = choices_limit(PairSnapshotForm(request.POST), viewer=request.user)
    if form.is_valid():
        try:
            snapshot = services.pair_snapshot_create(actor=request.user, **form.cleaned_data)
        except services.PairRefused as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("datasets:snapshot_detail", snapshot_id=snapshot.id)
    pairs = selectors.pair_list(viewer=request.user)
    context = {"form": PairFilterForm(), "page": Paginator(pairs, PAGE_SIZE).get_page(1), "query": "",
               "snapshot_form": form,
               "snapshots": selectors.snapshot_list(viewer=request.user).filter(kind=SnapshotKind.PAIRS)}  # fmt: skip
    return render(request, "datasets/pair_list.html", context, status=400)


def _api_agent(request: AuthedRequest, agent_name: str) -> JsonResponse | None:
    if agent_get(viewer=request.user, name=agent_name) is None:
        return JsonResponse({"error": f"no agent {agent_name!r}"}, status=404)
    return None


@permission_required(Perm.VIEW, api=True)
def api_pairs(request: AuthedRequest, agent_name: str) -> HttpResponse | StreamingHttpResponse:
    """`GET /api/v1/agents/<agent>/pairs.jsonl[?split=train|heldout&source=...]`: the agent's preference pairs
    as TRL conversational preference lines."""
    if missing := _api_agent(request, agent_name):
        return missing
    form = PairFilterForm({**request.GET.dict(), "agent": agent_name})
    if not form.is_valid():
        return JsonResponse({"error": form.errors.as_text()}, status=400)
    filters = form.filters()
    return _pairs_download(selectors.pair_list(filters=filters, viewer=request.user).iterator(), filters.split)


@permission_required(Perm.VIEW, api=True)
def api_corrections(request: AuthedRequest, agent_name: str) -> HttpResponse | StreamingHttpResponse:
    """`GET /api/v1/agents/<agent>/corrections.jsonl`: the agent's corrections, one JSON line each."""
    if missing := _api_agent(request, agent_name):
        return missing
    rows = correction_visible(viewer=request.user, agent_name=agent_name)
    return _jsonl((correction_line(row) for row in rows.iterator()), "corrections.jsonl")


@permission_required(Perm.VIEW)
def snapshot_detail(request: AuthedRequest, snapshot_id: UUID) -> HttpResponse:
    snapshot = _snapshot(request, snapshot_id)
    context = {
        "snapshot": snapshot,
        "breakdown": selectors.snapshot_breakdown(snapshot=snapshot),
        "items": snapshot.items.select_related("task")[:200],
        "pairs": snapshot.pair_items.all()[:200] if snapshot.kind == SnapshotKind.PAIRS else None,
        "formats": EXPORT_FORMATS,
    }
    return render(request, "datasets/snapshot_detail.html", context)


@permission_required(Perm.VIEW)
def snapshot_export(request: AuthedRequest, snapshot_id: UUID, format_name: str) -> StreamingHttpResponse:
    snapshot = _snapshot(request, snapshot_id)
    if format_name not in EXPORT_FORMATS:
        format_name = "native"
    response = StreamingHttpResponse(
        (line + "\n" for line in snapshot_lines(snapshot, format_name)), content_type="application/x-ndjson"
    )
    response["Content-Disposition"] = f'attachment; filename="{snapshot_file_name(snapshot, format_name)}"'
    return response


# --- synthetic batches ---------------------------------------------------------------------


def _batch(request: AuthedRequest, batch_id: UUID) -> SyntheticBatch:
    batch = selectors.synthetic_batch_get(batch_id=batch_id, viewer=request.user)
    if batch is None:
        raise Http404("no such synthetic batch")
    return batch


def _synthetic_list_page(request: AuthedRequest, form: SyntheticBatchForm, status: int = 200) -> HttpResponse:
    context = {"batches": selectors.synthetic_batch_list(viewer=request.user)[:100], "form": form}
    return render(request, "datasets/synthetic_list.html", context, status=status)


@permission_required(Perm.EDIT_TASKS)
def synthetic_list(request: AuthedRequest) -> HttpResponse:
    return _synthetic_list_page(request, choices_limit(SyntheticBatchForm(), viewer=request.user))


@permission_required(Perm.EDIT_TASKS)
@require_POST
def synthetic_new(request: AuthedRequest) -> HttpResponse:
    form = choices_limit(SyntheticBatchForm(request.POST), viewer=request.user)
    if form.is_valid():
        data = form.cleaned_data
        settings = services.BatchSettings(
            methods=tuple(data["methods"]), per_method=data["per_method"], seed=data["seed"],
            verifier=data["verifier"], threshold=data["threshold"], heldout_threshold=data["heldout_threshold"],
        )  # fmt: skip
        try:
            batch = services.synthetic_batch_create(actor=request.user, agent=data["agent"], settings=settings)
        except services.BatchRefused as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("datasets:synthetic_detail", batch_id=batch.id)
    return _synthetic_list_page(request, form, status=400)


def _synthetic_detail_page(request: AuthedRequest, batch: SyntheticBatch, error: str = "") -> HttpResponse:
    context = {"batch": batch, "preview": selectors.synthetic_batch_preview(batch=batch), "error": error}
    return render(request, "datasets/synthetic_detail.html", context, status=400 if error else 200)


@permission_required(Perm.EDIT_TASKS)
def synthetic_detail(request: AuthedRequest, batch_id: UUID) -> HttpResponse:
    """The preview: the report, the accepted variants beside their seeds, the rejected ones by filter."""
    return _synthetic_detail_page(request, _batch(request, batch_id))


@permission_required(Perm.EDIT_TASKS)
@require_POST
def synthetic_accept(request: AuthedRequest, batch_id: UUID) -> HttpResponse:
    """Accept the batch in bulk: every variant the filters kept becomes a train task, marked synthetic."""
    batch = _batch(request, batch_id)
    try:
        services.synthetic_batch_accept(actor=request.user, batch=batch)
    except services.BatchRefused as exc:
        return _synthetic_detail_page(request, batch, error=str(exc))
    return redirect("datasets:synthetic_detail", batch_id=batch.id)
