"""Pages of the triage app: queues, the keyboard-first review page, and the list with bulk actions.

The review page is one htmx partial (`triage/_review.html`): saving or skipping in a queue
answers with the next item's partial and pushes its URL, so the reviewer never waits for a
whole page. Without JavaScript the same forms post and redirect.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from flywheel.core.access import AuthedRequest, permission_required
from flywheel.core.models import Agent
from flywheel.core.roles import Perm
from flywheel.core.selectors import agent_get, sees_all_agents
from flywheel.core.templatetags.flywheel import pretty_json
from flywheel.datasets.conversion import agent_turn, failing_step
from flywheel.datasets.services import intervention_pairs_create
from flywheel.ingest.models import Step, StepKind, Trajectory
from flywheel.ingest.selectors import Cursor, trajectory_visible
from flywheel.triage import selectors, services
from flywheel.triage.forms import (
    BaseQueueRuleFormSet,
    BulkForm,
    CorrectionForm,
    QueueForm,
    ReviewForm,
    TriageFilterForm,
    queue_rule_formset,
)
from flywheel.triage.models import Correction, Queue
from flywheel.triage.queue_rules import QueueRule


@permission_required(Perm.VIEW)
def queue_list(request: AuthedRequest) -> HttpResponse:
    return render(request, "triage/queue_list.html", {"queues": selectors.queue_list(viewer=request.user)})


def _queue_form_valid(
    request: AuthedRequest, form: QueueForm, rules: BaseQueueRuleFormSet, queue: Queue | None
) -> bool:
    """Both parts valid (each shows its own errors), the filter's agent one of the user's, a filter or a rule."""
    valid = form.is_valid() & (not rules.is_bound or rules.is_valid())
    if valid:
        agent_name = form.triage_filters().base.agent
        if agent_name and not sees_all_agents(request.user) and agent_get(viewer=request.user, name=agent_name) is None:
            form.add_error(None, f"agent {agent_name!r}: not an agent you are a member of")
        form.needs_filter_or_rule(_posted_rules(rules, queue))
    return valid and form.is_valid()


def _posted_rules(rules: BaseQueueRuleFormSet, queue: Queue | None) -> list[QueueRule]:
    if rules.is_bound:
        return rules.rules()
    return selectors.queue_rules(queue) if queue else []


def _queue_form_page(
    request: AuthedRequest, form: QueueForm, rules: BaseQueueRuleFormSet, queue: Queue | None
) -> HttpResponse:
    """Create or update the queue the forms hold; the forms again with their errors when that fails."""
    if request.method == "POST" and _queue_form_valid(request, form, rules, queue):
        data = form.cleaned_data
        fields = {
            "actor": request.user,
            "name": data["name"],
            "description": data["description"],
            "filters": form.triage_filters(),
            "reviewers": list(data["reviewers"]),
            "rules": _posted_rules(rules, queue),
        }
        try:
            saved = services.queue_update(queue=queue, **fields) if queue else services.queue_create(**fields)
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            return redirect("triage:queue_detail", queue_id=saved.pk)
    return render(request, "triage/queue_form.html", {"form": form, "rules": rules, "queue": queue})


@permission_required(Perm.TRIAGE)
def queue_new(request: AuthedRequest) -> HttpResponse:
    form = QueueForm(request.POST or None, initial=request.GET.dict())
    return _queue_form_page(request, form, queue_rule_formset(request.POST or None, None), None)


def _queue(request: AuthedRequest, queue_id: int) -> Queue:
    """The queue, if the user may see it; 404 alike for no such queue and one of another agent."""
    queue = selectors.queue_get(queue_id=queue_id, viewer=request.user)
    if queue is None:
        raise Http404("no such queue")
    return queue


@permission_required(Perm.TRIAGE)
def queue_edit(request: AuthedRequest, queue_id: int) -> HttpResponse:
    queue = _queue(request, queue_id)
    if not selectors.queue_may_edit(queue, request.user):
        raise PermissionDenied("only the queue's owner or an admin edits it")
    form = QueueForm(request.POST or None, initial=QueueForm.initial_for(queue))
    return _queue_form_page(request, form, queue_rule_formset(request.POST or None, queue), queue)


@permission_required(Perm.VIEW)
def queue_detail(request: AuthedRequest, queue_id: int) -> HttpResponse:
    queue = _queue(request, queue_id)
    context = {
        "queue": queue,
        "progress": selectors.queue_progress_counted([queue], viewer=request.user)[queue.pk],
        "reviewers": selectors.queue_reviewers_counted(queue, viewer=request.user),
        "waiting": selectors.queue_waiting_members(queue, viewer=request.user),
        "recent": selectors.queue_recent_members(queue, viewer=request.user),
        "may_review": selectors.queue_may_review(queue, request.user),
        "may_edit": selectors.queue_may_edit(queue, request.user),
        "may_remove": selectors.queue_may_remove(queue, request.user),
        "filters": selectors.queue_filters(queue).to_json(),
        "rules": selectors.queue_rules(queue),
    }
    return render(request, "triage/queue_detail.html", context)


@permission_required(Perm.TRIAGE)
@require_POST
def queue_item_remove(request: AuthedRequest, queue_id: int, trajectory_id: UUID) -> HttpResponse:
    """Take a trajectory out of the queue for good (its reviewers or editors); rules never add it back."""
    queue = _queue(request, queue_id)
    trajectory = get_object_or_404(trajectory_visible(viewer=request.user), pk=trajectory_id)
    if not selectors.queue_may_remove(queue, request.user):
        raise PermissionDenied("only the queue's reviewers, its owner or an admin take items out of it")
    try:
        services.queue_item_remove(actor=request.user, queue=queue, trajectory=trajectory)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"{trajectory} removed from {queue.name}; its rules will not add it again.")
    return redirect("triage:queue_detail", queue_id=queue.pk)


def _review_url(trajectory: Trajectory, queue: Queue | None) -> str:
    url = reverse("triage:review", kwargs={"trajectory_id": trajectory.pk})
    return f"{url}?queue={queue.pk}" if queue else url


@permission_required(Perm.TRIAGE)
@require_POST
def queue_next(request: AuthedRequest, queue_id: int) -> HttpResponse:
    queue = _queue(request, queue_id)
    trajectory = services.queue_next(queue=queue, reviewer=request.user)
    if trajectory is None:
        messages.info(request, f"Nothing left to review in {queue.name}.")
        return redirect("triage:queue_detail", queue_id=queue.pk)
    return HttpResponseRedirect(_review_url(trajectory, queue))


def _queue_or_none(request: AuthedRequest, queue_id: object) -> Queue | None:
    try:
        return selectors.queue_get(queue_id=int(str(queue_id)), viewer=request.user) if queue_id else None
    except ValueError:
        return None


def _review_context(
    request: AuthedRequest, trajectory_id: UUID, queue: Queue | None, *, previous: Trajectory | None = None
) -> dict[str, object]:
    page = selectors.review_page(trajectory_id=trajectory_id, viewer=request.user)
    if page is None:
        raise Http404("no such trajectory")
    return {
        "page": page,
        "queue": queue,
        "progress": selectors.queue_progress_counted([queue], viewer=request.user)[queue.pk] if queue else None,
        "can_edit": request.user.has_perm(Perm.TRIAGE),
        "previous": previous,
    }


@permission_required(Perm.VIEW)
def review(request: AuthedRequest, trajectory_id: UUID) -> HttpResponse:
    queue = _queue_or_none(request, request.GET.get("queue"))
    previous = _trajectory_or_none(request, request.GET.get("previous"))
    context = _review_context(request, trajectory_id, queue, previous=previous)
    return render(request, "triage/review.html", context)


def _trajectory_or_none(request: AuthedRequest, value: object) -> Trajectory | None:
    try:
        return trajectory_visible(viewer=request.user).filter(pk=UUID(str(value))).first() if value else None
    except ValueError:
        return None


@permission_required(Perm.TRIAGE)
@require_POST
def review_save(request: AuthedRequest, trajectory_id: UUID) -> HttpResponse:
    """Save (or skip) a trajectory, then show the queue's next item, or this one again outside a queue."""
    trajectory = get_object_or_404(trajectory_visible(viewer=request.user), pk=trajectory_id)
    form = ReviewForm(request.POST, buckets=selectors.bucket_list())
    if not form.is_valid():
        return HttpResponse(f"Not saved: {form.errors.as_text()}", status=400, content_type="text/plain")
    queue = _queue_or_none(request, form.cleaned_data["queue"])
    try:
        if form.cleaned_data["action"] == "skip":
            services.review_skip(actor=request.user, trajectory=trajectory)
        else:
            services.review_submit(
                actor=request.user, trajectory=trajectory, choices=form.choices(), note=form.cleaned_data["note"]
            )
    except ValidationError as exc:
        return HttpResponse(f"Not saved: {' '.join(exc.messages)}", status=400, content_type="text/plain")
    following = services.queue_next(queue=queue, reviewer=request.user) if queue else trajectory
    return _after_save(request, following, queue, saved=trajectory)


def _after_save(
    request: AuthedRequest, following: Trajectory | None, queue: Queue | None, *, saved: Trajectory
) -> HttpResponse:
    if following is None and queue is not None:
        done = {"queue": queue, "progress": selectors.queue_progress(queue, viewer=request.user), "previous": saved}
        if request.headers.get("HX-Request"):
            response = render(request, "triage/_queue_done.html", done)
            response["HX-Push-Url"] = reverse("triage:queue_detail", kwargs={"queue_id": queue.pk})
            return response
        messages.success(request, f"Queue {queue.name} is done.")
        return redirect("triage:queue_detail", queue_id=queue.pk)
    following = following or saved
    url = _review_url(following, queue)
    url += ("&" if "?" in url else "?") + f"previous={saved.pk}"
    if not request.headers.get("HX-Request"):
        return HttpResponseRedirect(url)
    response = render(request, "triage/_review.html", _review_context(request, following.pk, queue, previous=saved))
    response["HX-Push-Url"] = url
    return response


def _correction_initial(steps: list[Step], step_index: int) -> dict[str, object]:
    """The form as the agent's turn at the step left it: its first call's tool and arguments, or its answer."""
    first = agent_turn(steps, step_index)[0]
    if first.kind == StepKind.ASSISTANT:
        return {"step": first.index, "kind": "answer", "answer": first.text}
    arguments = first.tool_arguments if isinstance(first.tool_arguments, dict) else {}
    return {"step": first.index, "kind": "call", "tool": first.tool_name, "arguments": pretty_json(arguments)}


def _asked_step(request: AuthedRequest, steps: list[Step]) -> int:
    value = request.GET.get("step", "")
    return int(value) if value.isdigit() else failing_step(steps)


@permission_required(Perm.TRIAGE)
def review_correct(request: AuthedRequest, trajectory_id: UUID) -> HttpResponse:
    """Correct the agent's turn at a step (`?step=N`, default the failing step): the form, and on POST the
    correction with what it yields; the form again with the reason when it is refused."""
    trajectory = get_object_or_404(trajectory_visible(viewer=request.user).select_related("agent"), pk=trajectory_id)
    steps = list(trajectory.steps.order_by("index"))
    queue = _queue_or_none(request, request.GET.get("queue"))
    tools = [tool["function"]["name"] for tool in trajectory.agent.tools]
    form = CorrectionForm(request.POST or None, tools=tools)
    status, problem = 200, ""
    if request.method == "POST":
        if form.is_valid():
            fix = form.correction_input()
            if (fix.make_pair or fix.task_split) and not request.user.has_perm(Perm.EDIT_TASKS):
                raise PermissionDenied("making a task or a preference pair needs the permission to edit tasks")
            try:
                correction = services.correction_create(actor=request.user, trajectory=trajectory, fix=fix)
            except ValidationError as exc:
                form.add_error(None, exc)
            else:
                messages.success(request, _yielded(correction))
                return HttpResponseRedirect(_review_url(trajectory, queue))
        status = 400
    elif steps:
        asked = _asked_step(request, steps)
        try:
            form.initial = _correction_initial(steps, asked)
        except ValueError as exc:
            form.initial, problem = {"step": asked}, f"{exc}: pick the step with ?step=N"
    context = {"trajectory": trajectory, "steps": steps, "form": form, "queue": queue, "problem": problem,
               "step": form.initial.get("step") if request.method == "GET" else form.data.get("step"),
               "back": _review_url(trajectory, queue)}  # fmt: skip
    return render(request, "triage/correct.html", context, status=status)


def _yielded(correction: Correction) -> str:
    task = correction.task
    made = [f"{task.get_split_display().lower()} task {task.external_id}"] if task else []
    pair = getattr(correction, "pair", None)
    made += [f"a {pair.get_split_display().lower()} preference pair"] if pair else []
    return f"Correction of step #{correction.step_index} saved" + (f": {', '.join(made)}." if made else ".")


@permission_required(Perm.EDIT_TASKS)
@require_POST
def review_interventions(request: AuthedRequest, trajectory_id: UUID) -> HttpResponse:
    """Turn the trajectory's human interventions into preference pairs (those not paired yet)."""
    trajectory = get_object_or_404(trajectory_visible(viewer=request.user).select_related("agent"), pk=trajectory_id)
    pairs = intervention_pairs_create(actor=request.user, trajectory=trajectory)
    messages.success(request, f"{len(pairs)} preference pair(s) made from human interventions.")
    return HttpResponseRedirect(_review_url(trajectory, _queue_or_none(request, request.POST.get("queue"))))


def _list_context(request: AuthedRequest) -> dict[str, object]:
    form = TriageFilterForm(request.GET)
    after = Cursor.decode(request.GET.get("after", ""))
    rows, next_cursor = selectors.triage_page(filters=form.triage_filters(), viewer=request.user, after=after)
    query = request.GET.copy()
    query.pop("after", None)
    return {
        "form": form,
        "trajectories": rows,
        "query": query.urlencode(),
        "next_query": f"{query.urlencode()}&after={next_cursor.encode()}" if next_cursor else None,
        "first_query": query.urlencode() if after else None,
        "buckets": selectors.bucket_list(),
        "queues": selectors.queue_visible(viewer=request.user),
        "judge_agent": _filtered_agent(request, form),
    }


def _filtered_agent(request: AuthedRequest, form: TriageFilterForm) -> Agent | None:
    """The agent the list is filtered to, if the viewer may see it: the judge's bucket suggestions are per agent."""
    name = form.cleaned_data.get("agent", "") if form.is_valid() else ""
    return agent_get(viewer=request.user, name=name.strip()) if name.strip() else None


@permission_required(Perm.VIEW)
def trajectory_list(request: AuthedRequest) -> HttpResponse:
    return render(request, "triage/trajectory_list.html", _list_context(request))


@permission_required(Perm.TRIAGE)
@require_POST
def bulk(request: AuthedRequest) -> HttpResponse:
    """Apply a bulk action, then return to the list with the same filter."""
    form = BulkForm(request.POST)
    form.fields["target_queue"].queryset = selectors.queue_visible(viewer=request.user)  # type: ignore[attr-defined]
    back = f"{reverse('triage:trajectory_list')}?{request.POST.get('query', '')}"
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, " ".join(str(error) for error in errors))
        return HttpResponseRedirect(back)
    data = form.cleaned_data
    if data["scope"] == "all":
        filters = TriageFilterForm(QueryDict(request.POST.get("query", ""))).triage_filters()
        ids = selectors.triage_ids(filters, viewer=request.user)
    else:
        ids = selectors.trajectory_ids_visible(data["ids"], viewer=request.user)
    messages.success(request, _bulk_apply(request, data, ids))
    return HttpResponseRedirect(back)


def _bulk_apply(request: AuthedRequest, data: dict[str, Any], ids: list[UUID]) -> str:
    action = data["action"]
    if action == "set_bucket":
        bucket = data["target_bucket"]
        changed = services.bucket_bulk_assign(actor=request.user, bucket=bucket, trajectory_ids=ids)
        return f"{bucket} set on {changed} of {len(ids)} trajectories."
    if action == "add_to_queue":
        queue = data["target_queue"]
        if not selectors.queue_may_edit(queue, request.user):
            raise PermissionDenied("only the queue's owner or an admin adds to it")
        changed = services.queue_items_add(actor=request.user, queue=queue, trajectory_ids=ids)
        return f"{changed} of {len(ids)} trajectories added to {queue}."
    changed = services.review_bulk_mark_reviewed(actor=request.user, trajectory_ids=ids)
    return f"{changed} of {len(ids)} trajectories marked reviewed."
