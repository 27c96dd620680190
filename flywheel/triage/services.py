"""Writes of the triage app: suggestions, reviews, bucket assignments, queues and their claims and rules,
corrections, buckets, policies.

Every change a person makes is recorded in the audit log. Three writes are not: suggestions
computed for freshly ingested trajectories (the system's, recomputable at will), items that a
queue's rules added (each records its rule) and claims (a lease on a queue item that expires by
itself). Arriving trajectories are suggested for first and then offered to the queues' rules, in
one task, since a rule may read the suggestions; arriving feedback is offered to the rules again.

Claims use `SELECT ... FOR UPDATE SKIP LOCKED` on PostgreSQL and a conditional UPDATE elsewhere,
so two reviewers never get the same trajectory.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast
from uuid import UUID

from django.apps import apps as global_apps
from django.apps.registry import Apps
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import DEFAULT_DB_ALIAS, connection, transaction
from django.db.models import Q, QuerySet
from django.db.models.functions import Substr
from django.utils import timezone
from django.utils.text import slugify

from flywheel.core.models import Agent, CountSummary
from flywheel.core.selectors import SYSTEM_READER
from flywheel.core.services import audit_record, recount_once, summaries_drop, summaries_store
from flywheel.datasets.conversion import agent_turn, conversation_before, step_source_ref, turn_message
from flywheel.datasets.models import PairSource, SourceKind, Split
from flywheel.datasets.pairs import call_message, text_message, trl_message
from flywheel.datasets.services import PairDraft, PairRefused, TaskOrigin, TaskRefused, pair_create, task_create
from flywheel.ingest.models import Step, Trajectory
from flywheel.triage import selectors
from flywheel.triage.guardrails import GuardrailSettings, GuardrailSettingsError, rule_ids
from flywheel.triage.models import (
    BUILT_IN_BUCKETS,
    AgentPolicy,
    Bucket,
    BucketAssignment,
    Correction,
    CorrectionKind,
    Queue,
    QueueItem,
    Review,
    ReviewState,
    Suggestion,
)
from flywheel.triage.queue_rules import QueueRule, SuggestedBucket, first_match, rules_json, rules_parse
from flywheel.triage.selectors import agent_policy_json
from flywheel.triage.suggestions import LLM_JUDGE, NEEDS_REVIEW, StepFacts, TraceFacts, suggest
from trainer.contracts import ContractError, ExpectedCall, Task, ToolCall
from trainer.verifiers.safety import SafetyPolicy
from trainer.verifiers.schema import call_problems

logger = logging.getLogger(__name__)
CLAIM_TTL = timedelta(minutes=15)
LOCK_TIMEOUT = "2s"  # how long a claim waits for a lock other than a row's (skipped) before giving up
CLAIM_ATTEMPTS = 20
CHUNK = 500
RESULT_TEXT_CHARS = 300
AUDITED_IDS = 1000


def _chunks(ids: Iterable[UUID | str], size: int = CHUNK) -> Iterator[list[UUID | str]]:
    chunk: list[UUID | str] = []
    for item in ids:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# --- the built-in buckets ------------------------------------------------------------------


def on_post_migrate(sender: object, apps: Apps = global_apps, using: str = DEFAULT_DB_ALIAS, **kwargs: Any) -> None:
    """After `migrate`, and after `flush` (which empties every table and then emits post_migrate, as Django
    relies on for its content types and permissions): the built-in buckets exist again."""
    try:
        apps.get_model("triage", "Bucket")
    except LookupError:  # migrated back to before the buckets' table
        return
    buckets_built_in_ensure(apps=apps, using=using)


def buckets_built_in_ensure(*, apps: Apps = global_apps, using: str = DEFAULT_DB_ALIAS) -> int:
    """Create the guide's buckets that are missing (ones that exist keep a team's edits); how many were.
    `apps` may be a migration's registry."""
    bucket_model = apps.get_model("triage", "Bucket")
    slugs = [slug for slug, *_ in BUILT_IN_BUCKETS]
    existing = set(bucket_model.objects.using(using).filter(slug__in=slugs).values_list("slug", flat=True))
    missing = [
        bucket_model(slug=slug, name=name, description=description, colour=colour, built_in=True, position=position)
        for position, (slug, name, description, colour) in enumerate(BUILT_IN_BUCKETS, start=1)
        if slug not in existing
    ]
    bucket_model.objects.using(using).bulk_create(missing)
    return len(missing)


# --- suggestions ---------------------------------------------------------------------------


def on_trajectories_stored(sender: object, trajectory_ids: list[UUID], **kwargs: Any) -> None:
    """`ingest.signals.trajectories_stored` receiver (connected in `TriageConfig.ready`): suggest for them,
    then let the queues' rules take them in."""
    suggestions_schedule(trajectory_ids=trajectory_ids)


def suggestions_schedule(*, trajectory_ids: Iterable[UUID | None]) -> None:
    """Suggest buckets for stored trajectories, then apply queue rules, on the `default` queue after commit
    (at once outside one).

    Computing in the background keeps ingest throughput as it was. It never fails an ingest:
    when the broker cannot be reached the error is logged and `manage.py suggest_buckets`
    catches the suggestions up later (not the queue rules: they take in what arrives). None
    entries (results without an id) are skipped.
    """
    from flywheel.triage.tasks import compute_suggestions

    ids = [str(trajectory_id) for trajectory_id in trajectory_ids if trajectory_id is not None]
    if ids:
        transaction.on_commit(lambda: compute_suggestions.delay(ids), robust=True)


def trajectories_triage(*, trajectory_ids: Sequence[UUID | str]) -> int:
    """What freshly stored trajectories go through: suggestions first, since a queue rule may read them,
    then the queues' rules. Returns how many queue items were added; safe to run twice."""
    suggestions_compute(trajectory_ids=trajectory_ids)
    return queue_rules_apply(trajectory_ids=trajectory_ids)


def suggestions_compute(*, trajectory_ids: Iterable[UUID | str]) -> int:
    """Replace these trajectories' suggestions with what the rules find now; returns how many were stored.

    Safe to run twice and concurrently: each chunk locks its reviews first. Ids of trajectories
    that are gone are ignored.
    """
    return sum(_suggest_chunk(chunk) for chunk in _chunks(trajectory_ids))


def suggestions_recompute(*, actor: User | None, everything: bool) -> int:
    """Suggest for trajectories never suggested for (all of them with `everything`); returns the count."""
    rows = Trajectory.objects.order_by("pk")
    if not everything:
        rows = rows.filter(Q(review__isnull=True) | Q(review__suggested_at__isnull=True))
    ids = list(rows.values_list("pk", flat=True))
    stored = suggestions_compute(trajectory_ids=ids)
    audit_record(
        actor=actor,
        action="suggestions.recompute",
        data={"trajectories": len(ids), "suggestions": stored, "all": everything},
    )
    return len(ids)


def suggestions_compute_for_agent(*, agent_id: UUID | str) -> int:
    ids = Trajectory.objects.filter(agent_id=agent_id).order_by("pk").values_list("pk", flat=True)
    return suggestions_compute(trajectory_ids=list(ids))


def _reviews_ensure(trajectory_ids: Sequence[UUID | str]) -> None:
    """A review row for each trajectory (unreviewed); existing rows are left alone."""
    existing = Trajectory.objects.filter(pk__in=trajectory_ids).order_by("pk").values_list("pk", flat=True)
    # Rows of known trajectories with defaults only: nothing for full_clean to catch, one INSERT for all.
    Review.objects.bulk_create([Review(trajectory_id=pk) for pk in existing], ignore_conflicts=True)


@transaction.atomic
def _suggest_chunk(trajectory_ids: Sequence[UUID | str]) -> int:
    _reviews_ensure(trajectory_ids)
    locked = list(
        Review.objects.select_for_update()
        .filter(trajectory_id__in=trajectory_ids)
        .order_by("trajectory_id")
        .values_list("trajectory_id", flat=True)
    )
    buckets = {bucket.slug: bucket for bucket in Bucket.objects.filter(built_in=True)}
    rows = [
        Suggestion(
            trajectory_id=trajectory_id,
            bucket=buckets[found.bucket] if found.bucket else None,
            rule=found.rule,
            reason=found.reason,
            step_index=found.step_index,
        )
        for trajectory_id, facts in trace_facts(locked).items()
        for found in suggest(facts)
    ]
    # The judge's suggestions come from a job, not from these rules: recomputing the rules keeps them.
    Suggestion.objects.filter(trajectory_id__in=locked).exclude(rule=LLM_JUDGE).delete()
    Suggestion.objects.bulk_create(rows)
    Review.objects.filter(trajectory_id__in=locked).update(suggested_at=timezone.now())
    return len(rows)


def trace_facts(trajectory_ids: Sequence[UUID]) -> dict[UUID, TraceFacts]:
    """What the rules read, for many trajectories in a few queries (step texts cut short)."""
    steps: dict[UUID, list[StepFacts]] = {pk: [] for pk in trajectory_ids}
    rows = (
        Step.objects.filter(trajectory_id__in=trajectory_ids)
        .order_by("trajectory_id", "index")
        .annotate(short_text=Substr("text", 1, RESULT_TEXT_CHARS))
        .values_list(
            "trajectory_id",
            "index",
            "kind",
            "tool_name",
            "tool_arguments",
            "tool_arguments_raw",
            "tool_call_id",
            "is_error",
            "short_text",
        )
    )
    for trajectory_id, index, kind, tool, arguments, raw, call_id, is_error, text in rows:
        steps[trajectory_id].append(StepFacts(index, kind, tool, arguments, raw, call_id, is_error, text))
    outcomes = dict(Trajectory.objects.filter(pk__in=trajectory_ids).values_list("pk", "outcome"))
    agents = dict(Trajectory.objects.filter(pk__in=trajectory_ids).values_list("pk", "agent_id"))
    catalogue = dict(Agent.objects.filter(pk__in=set(agents.values())).values_list("pk", "tools"))
    policies = {agent_id: _policy_for(agent_id) for agent_id in set(agents.values())}
    return {
        pk: TraceFacts(outcomes[pk], steps[pk], catalogue[agents[pk]], policies[agents[pk]])
        for pk in trajectory_ids
        if pk in outcomes
    }


def _policy_for(agent_id: UUID) -> SafetyPolicy:
    stored = agent_policy_json(agent_id)
    return SafetyPolicy.from_json(stored) if stored is not None else SafetyPolicy.default()


# --- reviews -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BucketChoice:
    """A bucket a reviewer put on a trajectory, and the step it points at (None: the whole trajectory)."""

    bucket: Bucket
    step_index: int | None = None


def _review_locked(trajectory: Trajectory) -> Review:
    _reviews_ensure([trajectory.pk])
    return Review.objects.select_for_update().get(trajectory=trajectory)


def _assignment_summary(trajectory: Trajectory) -> dict[str, int | None]:
    rows = BucketAssignment.objects.filter(trajectory=trajectory).values_list("bucket__slug", "step_index")
    return dict(rows)


def _choices_check(trajectory: Trajectory, choices: Sequence[BucketChoice]) -> None:
    for choice in choices:
        if choice.step_index is not None and not 0 <= choice.step_index < trajectory.step_count:
            raise ValidationError(f"{choice.bucket.name}: step #{choice.step_index} is not in this trajectory")
    slugs = [choice.bucket.slug for choice in choices]
    if len(slugs) != len(set(slugs)):
        raise ValidationError("a bucket was chosen twice")


def _assignments_replace(*, actor: User, trajectory: Trajectory, choices: Sequence[BucketChoice]) -> None:
    """Make the trajectory's buckets exactly `choices`; unchanged assignments keep who made them."""
    existing = {row.bucket_id: row for row in BucketAssignment.objects.filter(trajectory=trajectory)}
    chosen = {choice.bucket.pk: choice for choice in choices}
    BucketAssignment.objects.filter(trajectory=trajectory).exclude(bucket_id__in=chosen).delete()
    suggested = {(row.bucket_id, row.step_index): row.rule for row in Suggestion.objects.filter(trajectory=trajectory)}
    for bucket_id, choice in chosen.items():
        current = existing.get(bucket_id)
        if current is not None and current.step_index == choice.step_index:
            continue
        rule = suggested.get((bucket_id, choice.step_index), "")
        assignment = current or BucketAssignment(trajectory=trajectory, bucket=choice.bucket)
        assignment.step_index = choice.step_index
        assignment.source = BucketAssignment.Source.SUGGESTION if rule else BucketAssignment.Source.HUMAN
        assignment.rule = rule
        assignment.assigned_by = actor
        assignment.full_clean()
        assignment.save()


ReviewMark = tuple[str, str | None]  # a review's state and its reviewer's name, as the queue summaries count it


def _review_mark(review: Review) -> ReviewMark:
    reviewer = review.reviewer
    return review.state, reviewer.get_username() if reviewer is not None else None


def _count_move(counts: dict[str, Any], mark: ReviewMark, by: int) -> None:
    state, name = mark
    column = {ReviewState.REVIEWED: 0, ReviewState.SKIPPED: 1}.get(ReviewState(state))
    if column is None:
        return
    key = ("reviewed", "skipped")[column]
    counts[key] = counts.get(key, 0) + by
    if name is not None:
        counts.setdefault("reviewers", {}).setdefault(name, [0, 0])[column] += by


def _queue_summaries_follow(trajectory: Trajectory, before: ReviewMark, review: Review) -> None:
    """Move one review's change into the counted summaries of the queues it is a member of, in its transaction:
    a reviewer sees their own save in the progress at once, and beat's next recount finds the same numbers."""
    after = _review_mark(review)
    if after == before:
        return
    rows = {row.kind: row for row in CountSummary.objects.select_for_update().filter(
        agent_id=trajectory.agent_id, kind__startswith=selectors.QUEUE_SUMMARY_PREFIX)}  # fmt: skip
    queues = [queue for queue in Queue.objects.order_by("pk") if selectors.queue_summary_kind(queue.pk) in rows]
    members = selectors.queue_members_among(queues, [trajectory.pk], viewer=cast(User, SYSTEM_READER))
    for queue in queues:
        if trajectory.pk in members[queue.pk]:
            row = rows[selectors.queue_summary_kind(queue.pk)]
            _count_move(row.counts, before, -1)
            _count_move(row.counts, after, 1)
            row.save(update_fields=["counts"])


@transaction.atomic
def review_submit(*, actor: User, trajectory: Trajectory, choices: Sequence[BucketChoice], note: str = "") -> Review:
    """Store a reviewer's buckets and note, mark the trajectory reviewed, and release its claim."""
    _choices_check(trajectory, choices)
    review = _review_locked(trajectory)
    marked = _review_mark(review)
    before = _assignment_summary(trajectory)
    _assignments_replace(actor=actor, trajectory=trajectory, choices=choices)
    review.state = ReviewState.REVIEWED
    review.reviewer = actor
    review.note = note
    review.reviewed_at = timezone.now()
    review.claimed_by = review.claimed_until = None
    review.full_clean()
    review.save()
    _queue_summaries_follow(trajectory, marked, review)
    after = {choice.bucket.slug: choice.step_index for choice in choices}
    audit_record(actor=actor, action="review.submit", target=trajectory, data={"buckets": after, "before": before})
    return review


@transaction.atomic
def review_skip(*, actor: User, trajectory: Trajectory) -> Review:
    """Set an unreviewed trajectory aside (a reviewed one stays reviewed) and release its claim."""
    review = _review_locked(trajectory)
    marked = _review_mark(review)
    if review.state == ReviewState.UNREVIEWED:
        review.state = ReviewState.SKIPPED
        review.reviewer = actor
    review.claimed_by = review.claimed_until = None
    review.full_clean()
    review.save()
    _queue_summaries_follow(trajectory, marked, review)
    audit_record(actor=actor, action="review.skip", target=trajectory, data={"state": review.state})
    return review


# --- corrections ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CorrectionInput:
    """A reviewer's fix of the agent's turn at `step_index`: a call (`call`) or else an answer text,
    and what it should become: a task in `task_split` (train: an SFT example; heldout: a regression
    task; "": none) and/or a preference pair (in the task's split, else `pair_split`)."""

    step_index: int
    call: ToolCall | None = None
    answer: str = ""
    note: str = ""
    make_pair: bool = False
    task_split: str = ""
    pair_split: str = Split.TRAIN


def _corrected_message(agent: Agent, fix: CorrectionInput) -> dict[str, Any]:
    """The corrected turn as an assistant message; ValidationError for a call the catalogue refuses."""
    if fix.call is None:
        if not fix.answer.strip():
            raise ValidationError("write the answer the agent should have given")
        return text_message(fix.answer.strip())
    schemas = {tool["function"]["name"]: tool["function"].get("parameters") or {} for tool in agent.tools}
    problems = call_problems(fix.call, schemas)
    if problems:
        raise ValidationError([f"not a call the agent's catalogue allows: {problem}" for problem in problems])
    return call_message(fix.call.name, fix.call.arguments)


def _correction_task(correction: Correction, prompt: list[dict[str, Any]], fix: CorrectionInput) -> None:
    trajectory = correction.trajectory
    expected = [ExpectedCall.exact(fix.call.name, fix.call.arguments)] if fix.call else []
    try:
        task = Task(
            id=f"{trajectory.external_id or trajectory.pk}@step{correction.step_index}",
            messages=prompt,
            tools=list(trajectory.agent.tools),
            expected_calls=expected,
            no_call_expected=fix.call is None,
        )
        origin = TaskOrigin(
            source_kind=SourceKind.TRAJECTORY,
            source_trajectory_id=trajectory.pk,
            source_ref=step_source_ref(correction.step_index),
        )
        correction.task = task_create(
            actor=correction.reviewer, task=task, split=fix.task_split, agent=trajectory.agent, origin=origin
        )
    except (ContractError, TaskRefused) as error:
        raise ValidationError(f"no task made: {error}") from error


@transaction.atomic
def correction_create(*, actor: User, trajectory: Trajectory, fix: CorrectionInput) -> Correction:
    """Store a reviewer's correction of a failing step and what it yields, all or nothing.

    The corrected call must name a tool of the agent's catalogue and fit its schema
    (`trainer.verifiers.schema`); the step must be the agent's (a call or an answer). Raises
    ValidationError saying what is wrong; nothing is stored then.
    """
    if fix.task_split not in ("", *Split.values):
        raise ValidationError(f"a task goes to train or heldout, not {fix.task_split!r}")
    steps = list(trajectory.steps.order_by("index"))
    try:
        turn = agent_turn(steps, fix.step_index)
    except ValueError as error:
        raise ValidationError(str(error)) from error
    original = trl_message(turn_message(turn))
    corrected = _corrected_message(trajectory.agent, fix)
    if corrected == original:
        raise ValidationError("the correction is what the agent did: change the call or the answer")
    correction = Correction(
        trajectory=trajectory, step_index=turn[0].index, original=original, corrected=corrected, note=fix.note,
        kind=CorrectionKind.ANSWER if fix.call is None else CorrectionKind.CALL, reviewer=actor,
    )  # fmt: skip
    correction.full_clean()
    correction.save()
    prompt = [trl_message(message) for message in conversation_before(steps, correction.step_index)]
    if fix.task_split:
        _correction_task(correction, prompt, fix)
        correction.save(update_fields=["task", "updated_at"])
    if fix.make_pair:
        draft = PairDraft(
            agent=trajectory.agent,
            prompt=prompt,
            tools=list(trajectory.agent.tools),
            chosen=[corrected],
            rejected=[original],
            source=PairSource.CORRECTION,
            trajectory=trajectory,
            step_index=correction.step_index,
            correction_id=correction.pk,
        )
        try:
            pair_create(actor=actor, draft=draft, split=fix.task_split or fix.pair_split)
        except PairRefused as error:
            raise ValidationError(f"no pair made: {error}") from error
    audit_record(actor=actor, action="correction.create", target=trajectory,
                 data={"step": correction.step_index, "kind": correction.kind, "task_split": fix.task_split,
                       "pair": fix.make_pair})  # fmt: skip
    return correction


# --- queues and claims ---------------------------------------------------------------------


def queue_next(*, queue: Queue, reviewer: User) -> Trajectory | None:
    """The trajectory this reviewer should review next, claimed for them; None when the queue is done.

    A reviewer's live claim comes back first (a reload does not take a second item). Claims
    expire after CLAIM_TTL, so items abandoned in a closed tab return to the queue. Members without
    a review row yet (ingested before triage, or their suggestions still queued) are handed out once
    none with one is left: finding them reads every member, which "next" cannot afford on each call.
    """
    if not selectors.queue_may_review(queue, reviewer):
        raise PermissionDenied(f"{reviewer.get_username()} is not a reviewer of queue {queue.name}")
    held = selectors.queue_held(queue, reviewer)
    if held is not None:
        return held.trajectory
    claim = _claim_skip_locked if connection.vendor == "postgresql" else _claim_conditional
    review = claim(selectors.queue_candidates(queue, viewer=reviewer), reviewer)
    if review is None:
        missing = selectors.queue_missing_reviews(queue, viewer=reviewer, limit=CHUNK)
        if missing:
            _reviews_ensure(missing)
            review = claim(selectors.queue_candidates(queue, viewer=reviewer), reviewer)
    return review.trajectory if review is not None else None


def _claim_skip_locked(candidates: list[QuerySet[Review]], reviewer: User) -> Review | None:
    """Lock each part's first candidate nobody else is locking, and claim the oldest of them; rows locked by
    others are skipped (the others locked here are free again at the commit, a moment later)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [LOCK_TIMEOUT])
        firsts = [
            review
            for part in candidates
            if (review := part.select_related("trajectory").select_for_update(skip_locked=True, of=("self",)).first())
        ]
        if not firsts:
            return None
        review = min(firsts, key=lambda row: (row.trajectory.ingested_at, row.trajectory_id))
        review.claimed_by = reviewer
        review.claimed_until = timezone.now() + CLAIM_TTL
        review.save(update_fields=["claimed_by", "claimed_until", "updated_at"])
        return review


def _claim_conditional(candidates: list[QuerySet[Review]], reviewer: User) -> Review | None:
    """Claim with an UPDATE that only matches an unclaimed row; 0 rows means someone was faster."""
    for _ in range(CLAIM_ATTEMPTS):
        firsts = [row for part in candidates
                  if (row := part.values_list("trajectory__ingested_at", "trajectory_id", "pk").first())]  # fmt: skip
        if not firsts:
            return None
        pk = min(firsts)[2]
        now = timezone.now()
        unclaimed = Q(claimed_until__isnull=True) | Q(claimed_until__lte=now)
        won = Review.objects.filter(unclaimed, pk=pk, state=ReviewState.UNREVIEWED).update(
            claimed_by=reviewer, claimed_until=now + CLAIM_TTL, updated_at=now
        )
        if won:
            return Review.objects.select_related("trajectory").get(pk=pk)
    return None


def _rules_check(rules: Sequence[QueueRule]) -> None:
    """The buckets the rules name exist (rules_parse checked the rest)."""
    named = {slug for rule in rules if isinstance(c := rule.condition(SuggestedBucket.KIND), SuggestedBucket)
             for slug in c.buckets}  # fmt: skip
    unknown = sorted(named - {NEEDS_REVIEW} - set(Bucket.objects.filter(slug__in=named).values_list("slug", flat=True)))
    if unknown:
        raise ValidationError(f"a rule names no bucket there is: {unknown[0]!r}")


def _queue_save(
    *, queue: Queue, filters: selectors.TriageFilters, reviewers: Sequence[User], rules: Sequence[QueueRule]
) -> None:
    _rules_check(rules)
    queue.filters = filters.to_json()
    queue.rules = rules_json(rules)
    queue.full_clean()
    queue.save()
    queue.reviewers.set(reviewers)


@transaction.atomic
def queue_create(
    *,
    actor: User,
    name: str,
    filters: selectors.TriageFilters,
    reviewers: Sequence[User] = (),
    description: str = "",
    rules: Sequence[QueueRule] = (),
) -> Queue:
    """A queue; its rules take in trajectories that arrive from now on (nothing stored before is added)."""
    queue = Queue(name=name, description=description, created_by=actor)
    _queue_save(queue=queue, filters=filters, reviewers=reviewers, rules=rules)
    audit_record(actor=actor, action="queue.create", target=queue, data=_queue_data(queue))
    return queue


@transaction.atomic
def queue_update(
    *,
    actor: User,
    queue: Queue,
    name: str,
    filters: selectors.TriageFilters,
    reviewers: Sequence[User],
    description: str = "",
    rules: Sequence[QueueRule] = (),
) -> Queue:
    """Change a queue; items its earlier rules added stay, and changed rules apply to arrivals from now on."""
    queue.name, queue.description = name, description
    _queue_save(queue=queue, filters=filters, reviewers=reviewers, rules=rules)
    summaries_drop(kind=selectors.queue_summary_kind(queue.pk))  # its filter may have changed: recount on view
    audit_record(actor=actor, action="queue.update", target=queue, data=_queue_data(queue))
    return queue


def _queue_data(queue: Queue) -> dict[str, Any]:
    reviewers = sorted(queue.reviewers.values_list("username", flat=True))
    return {"filters": queue.filters, "rules": queue.rules, "reviewers": reviewers}


@transaction.atomic
def queue_items_add(*, actor: User, queue: Queue, trajectory_ids: Sequence[UUID]) -> int:
    """Add trajectories to a queue by hand; those already in it are left alone. Returns how many were new.

    A person adding one that was removed puts it back (as hand-added): the tombstone keeps rules
    out, not people.
    """
    before = QueueItem.objects.filter(queue=queue).count()
    restored = 0
    for chunk in _chunks(trajectory_ids):
        known = Trajectory.objects.filter(pk__in=chunk).values_list("pk", flat=True)
        items = [QueueItem(queue=queue, trajectory_id=pk, added_by=actor) for pk in known]
        QueueItem.objects.bulk_create(items, ignore_conflicts=True)
        restored += QueueItem.objects.filter(queue=queue, trajectory_id__in=chunk, removed_at__isnull=False).update(
            source=QueueItem.Source.HAND, rule="", added_by=actor, added_at=timezone.now(),
            removed_at=None, removed_by=None,
        )  # fmt: skip
    added = QueueItem.objects.filter(queue=queue).count() - before + restored
    summaries_drop(kind=selectors.queue_summary_kind(queue.pk))  # who added them sees them counted
    audit_record(actor=actor, action="queue.add_items", target=queue, data=_bulk_data(trajectory_ids, added))
    return added


@transaction.atomic
def queue_item_remove(*, actor: User, queue: Queue, trajectory: Trajectory) -> QueueItem:
    """Take a trajectory out of a queue for good: its item becomes a tombstone that rules never add again
    and that hides it from the queue even where the filter matches it. Removing it twice changes nothing.
    """
    item = QueueItem.objects.select_for_update().filter(queue=queue, trajectory=trajectory).first()
    if item is not None and item.removed_at is not None:
        return item
    if trajectory.pk not in selectors.queue_members_among([queue], [trajectory.pk], viewer=actor)[queue.pk]:
        raise ValidationError(f"{trajectory} is not in queue {queue.name}")
    if item is None:
        # Only the filter matched it: the tombstone is the row. A rule adding it meanwhile loses the race.
        item, _ = QueueItem.objects.get_or_create(
            queue=queue, trajectory=trajectory, defaults={"source": QueueItem.Source.FILTER}
        )
    item.removed_at, item.removed_by = timezone.now(), actor
    item.full_clean()
    item.save()
    summaries_drop(kind=selectors.queue_summary_kind(queue.pk))
    data = {"trajectory": str(trajectory.pk), "source": item.source, "rule": item.rule}
    audit_record(actor=actor, action="queue.remove_item", target=queue, data=data)
    return item


def queue_summaries_recount(*, queue_ids: Sequence[int] | None = None) -> int:
    """Recount the queues' summaries (all queues by default; beat's `summaries_recount`), and forget those of
    deleted queues. Each is counted in its own transaction, so it is one consistent count, and once at a
    time (`recount_once`: a recount of it already running is waited for). Returns how many."""
    queues = Queue.objects.all() if queue_ids is None else Queue.objects.filter(pk__in=queue_ids)
    recounted = 0
    for queue in queues:
        kind = selectors.queue_summary_kind(queue.pk)

        def recount(queue: Queue = queue, kind: str = kind) -> None:
            with transaction.atomic():
                counted_at = timezone.now()
                summaries_store(kind=kind, counts=selectors.queue_counts_by_agent(queue), counted_at=counted_at)

        recount_once(kind, recount)
        recounted += 1
    if queue_ids is None:
        kept = [selectors.queue_summary_kind(pk) for pk in Queue.objects.values_list("pk", flat=True)]
        CountSummary.objects.filter(kind__startswith="queue:").exclude(kind__in=kept).delete()
    return recounted


# --- queue rules ---------------------------------------------------------------------------


def on_feedback_received(sender: object, trajectory_ids: list[UUID], **kwargs: Any) -> None:
    """`ingest.signals.feedback_received` receiver (connected in `TriageConfig.ready`): offer the
    trajectories to the queues' rules again, since a rule on feedback may match them now."""
    queue_rules_schedule(trajectory_ids=trajectory_ids)


def on_online_scores_stored(sender: object, trajectory_ids: list[UUID], **kwargs: Any) -> None:
    """`monitoring.signals.online_scores_stored` receiver (connected in `TriageConfig.ready`): offer the
    scored trajectories to the queues' rules again, since a rule on an online score may match them now."""
    queue_rules_schedule(trajectory_ids=trajectory_ids)


def queue_rules_schedule(*, trajectory_ids: Iterable[UUID]) -> None:
    """Apply the queues' rules to these trajectories on the `default` queue, after commit (at once outside one).

    Never fails the caller: when the broker cannot be reached the error is logged, and the rules
    see the trajectory again when its next signal (feedback, a re-ingest) arrives.
    """
    from flywheel.triage.tasks import apply_queue_rules

    ids = [str(trajectory_id) for trajectory_id in trajectory_ids]
    if ids:
        transaction.on_commit(lambda: apply_queue_rules.delay(ids), robust=True)


@dataclass(frozen=True)
class _RuledQueue:
    pk: int
    agent: str  # the agent its filter names: only that agent's trajectories join; "" for any
    rules: list[QueueRule]


def queue_rules_apply(*, trajectory_ids: Sequence[UUID | str]) -> int:
    """Add the trajectories that a queue's rules match to that queue, recording the first matching rule;
    returns how many items it added (where two runs race over one pair, both may count it).

    Anyone may call it again after new signals arrive (suggestions, feedback, online scores): it
    is idempotent. An item already in the queue stays as it is, and one a reviewer
    removed stays removed (its tombstone holds the queue and trajectory pair). A queue whose filter
    names an agent takes in only that agent's trajectories. Ids of trajectories that are gone are
    ignored.
    """
    queues = _queues_with_rules()
    if not queues:
        return 0
    return sum(_rules_apply_chunk(queues, chunk) for chunk in _chunks(trajectory_ids))


def _queues_with_rules() -> list[_RuledQueue]:
    found = []
    for pk, filters, rules in Queue.objects.order_by("pk").values_list("pk", "filters", "rules"):
        if not rules:
            continue
        try:
            parsed = rules_parse(rules)
        except ValidationError as error:  # saved through queue_create/update, so only a hand-edited row
            logger.warning("queue %s has rules that do not parse, skipped: %s", pk, error.messages)
            continue
        found.append(_RuledQueue(pk, str((filters or {}).get("agent", "")), parsed))
    return found


def _rules_apply_chunk(queues: list[_RuledQueue], trajectory_ids: Sequence[UUID | str]) -> int:
    facts = selectors.queue_rule_facts(trajectory_ids)
    taken = set(
        QueueItem.objects.filter(queue_id__in=[queue.pk for queue in queues], trajectory_id__in=list(facts))
        .values_list("queue_id", "trajectory_id")
    )  # fmt: skip
    items = []
    for queue in queues:
        for trajectory_id, known in facts.items():
            if (queue.pk, trajectory_id) in taken or (queue.agent and known.agent != queue.agent):
                continue
            rule = first_match(queue.rules, known)
            if rule is not None:
                items.append(QueueItem(queue_id=queue.pk, trajectory_id=trajectory_id, source=QueueItem.Source.RULE,
                                       rule=rule.name))  # fmt: skip
    # Rows of known queues and trajectories with a validated rule name: nothing for full_clean to catch.
    # A concurrent run (or a reviewer's tombstone) holding the pair wins; this one adds nothing for it.
    QueueItem.objects.bulk_create(items, ignore_conflicts=True)
    return len(items)


# --- bulk actions --------------------------------------------------------------------------


def _bulk_data(trajectory_ids: Sequence[UUID], changed: int, **extra: Any) -> dict[str, Any]:
    ids = [str(pk) for pk in trajectory_ids[:AUDITED_IDS]]
    return {"selected": len(trajectory_ids), "changed": changed, "ids": ids, **extra}


@transaction.atomic
def bucket_bulk_assign(*, actor: User, bucket: Bucket, trajectory_ids: Sequence[UUID]) -> int:
    """Put a bucket (no step) on many trajectories; those that carry it already keep theirs."""
    changed = 0
    for chunk in _chunks(trajectory_ids):
        has_it = BucketAssignment.objects.filter(bucket=bucket, trajectory_id__in=chunk).values("trajectory_id")
        fresh = Trajectory.objects.filter(pk__in=chunk).exclude(pk__in=has_it).values_list("pk", flat=True)
        rows = [BucketAssignment(trajectory_id=pk, bucket=bucket, assigned_by=actor) for pk in fresh]
        changed += len(BucketAssignment.objects.bulk_create(rows, ignore_conflicts=True))
    audit_record(actor=actor, action="bucket.bulk_assign", target=bucket, data=_bulk_data(trajectory_ids, changed))
    return changed


@transaction.atomic
def review_bulk_mark_reviewed(*, actor: User, trajectory_ids: Sequence[UUID]) -> int:
    """Mark many trajectories reviewed by `actor`, releasing their claims; returns how many changed."""
    changed = 0
    now = timezone.now()
    for chunk in _chunks(trajectory_ids):
        _reviews_ensure(chunk)
        changed += (
            Review.objects.filter(trajectory_id__in=chunk)
            .exclude(state=ReviewState.REVIEWED)
            .update(
                state=ReviewState.REVIEWED,
                reviewer=actor,
                reviewed_at=now,
                claimed_by=None,
                claimed_until=None,
                updated_at=now,
            )
        )
    audit_record(actor=actor, action="review.bulk_mark_reviewed", data=_bulk_data(trajectory_ids, changed))
    return changed


# --- buckets -------------------------------------------------------------------------------


@transaction.atomic
def bucket_create(
    *, actor: User, name: str, description: str = "", colour: str = "#868e96", position: int = 100
) -> Bucket:
    """A custom bucket; its slug comes from its name."""
    bucket = Bucket(
        slug=slugify(name).replace("-", "_")[:50], name=name, description=description, colour=colour, position=position
    )
    if not bucket.slug:
        raise ValidationError({"name": "the name needs at least one letter or digit"})
    bucket.full_clean()
    bucket.save()
    audit_record(actor=actor, action="bucket.create", target=bucket, data={"colour": colour, "position": position})
    return bucket


@transaction.atomic
def bucket_update(*, actor: User, bucket: Bucket, name: str, description: str, colour: str, position: int) -> Bucket:
    """Rename, describe, recolour or reorder a bucket; a built-in bucket's slug (the rules use it) stays."""
    bucket.name, bucket.description, bucket.colour, bucket.position = name, description, colour, position
    bucket.full_clean()
    bucket.save()
    audit_record(actor=actor, action="bucket.update", target=bucket, data={"colour": colour, "position": position})
    return bucket


@transaction.atomic
def bucket_delete(*, actor: User, bucket: Bucket) -> None:
    """Delete a custom bucket nobody uses; built-in buckets are never deleted."""
    if bucket.built_in:
        raise ValidationError(f"{bucket.name} is a built-in bucket and cannot be deleted")
    used = BucketAssignment.objects.filter(bucket=bucket).count()
    if used:
        raise ValidationError(f"{bucket.name} is on {used} trajectories; remove it from them first")
    audit_record(actor=actor, action="bucket.delete", target=bucket)
    bucket.delete()


# --- safety policies -----------------------------------------------------------------------


def policy_validate(policy: Any) -> SafetyPolicy:
    """Parse a safety policy as trainer reads it, with its regular expressions compiled; ValidationError if bad."""
    if not isinstance(policy, dict):
        raise ValidationError("a safety policy is a JSON object")
    try:
        parsed = SafetyPolicy.from_json(policy)
        for rule in parsed.argument_patterns:
            re.compile(rule.pattern)
    except (ContractError, re.error) as error:
        raise ValidationError(str(error)) from error
    return parsed


def guardrails_validate(guardrails: Any, *, policy: SafetyPolicy) -> GuardrailSettings:
    """Parse guardrail settings against the rules of `policy`; ValidationError if they name another rule."""
    try:
        return GuardrailSettings.from_json(guardrails, known_rules=rule_ids(policy))
    except GuardrailSettingsError as error:
        raise ValidationError(str(error)) from error


@transaction.atomic
def agent_policy_set(
    *, actor: User, agent: Agent, policy: dict[str, Any], guardrails: dict[str, Any] | None = None
) -> AgentPolicy:
    """Give an agent its own safety policy and recompute its trajectories' suggestions (in the background).

    `guardrails` (per-rule actions of the served endpoint) replace the stored ones when given;
    either way they must name only rules of the new policy.
    """
    from flywheel.triage.tasks import recompute_agent_suggestions

    parsed = policy_validate(policy)
    record = AgentPolicy.objects.filter(agent=agent).first() or AgentPolicy(agent=agent)
    record.policy = policy
    if guardrails is not None:
        record.guardrails = guardrails
    guardrails_validate(record.guardrails, policy=parsed)
    record.updated_by = actor
    record.full_clean()
    record.save()
    audit_record(actor=actor, action="agent_policy.set", target=agent,
                 data={"policy": policy, "guardrails": record.guardrails})  # fmt: skip
    recompute_agent_suggestions.delay_on_commit(str(agent.pk))  # type: ignore[attr-defined]
    return record


@transaction.atomic
def agent_policy_clear(*, actor: User, agent: Agent) -> None:
    """Return an agent to trainer's default safety policy."""
    from flywheel.triage.tasks import recompute_agent_suggestions

    AgentPolicy.objects.filter(agent=agent).delete()
    audit_record(actor=actor, action="agent_policy.clear", target=agent)
    recompute_agent_suggestions.delay_on_commit(str(agent.pk))  # type: ignore[attr-defined]
