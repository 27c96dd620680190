"""Reads of the triage app: filtered trajectory lists, queue members and progress, the review page.

The trajectory filters are the ingest app's (`trajectory_queryset`) plus bucket, suggested
bucket and review state. A queue's members are those its filter matches and its items (added by
hand or by a rule), less the items a reviewer removed. Writes, claims included, are in `services.py`.

Every read takes the viewer: trajectories keep to the agents they may see, and a queue whose
filter names an agent they may not see is not theirs to see (its contents would be empty and its
name would tell of the agent). Queues are edited by their owner or an admin (`queue_may_edit`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, fields
from datetime import date, datetime
from typing import Any, cast
from uuid import UUID

from django.contrib.auth.models import User
from django.db import connection
from django.db.models import (
    BooleanField,
    Count,
    Exists,
    IntegerField,
    Min,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.utils import timezone

from flywheel.core.roles import Perm
from flywheel.core.selectors import SYSTEM_READER, agents_filter, sees_all_agents, summaries_read, visible_agents
from flywheel.ingest.models import Feedback, Step, StepKind, Trajectory
from flywheel.ingest.selectors import (
    CopyLead,
    Cursor,
    TrajectoryFilters,
    keyset_page,
    list_lead,
    trajectory_queryset,
)
from flywheel.monitoring.models import OnlineScore
from flywheel.triage.models import (
    AgentPolicy,
    Bucket,
    BucketAssignment,
    Correction,
    Queue,
    QueueItem,
    Review,
    ReviewState,
    Suggestion,
)
from flywheel.triage.queue_rules import QueueRule, TrajectoryFacts, rules_parse
from flywheel.triage.suggestions import NEEDS_REVIEW

_DATE_FIELDS = ("since", "until")
_OWN_FIELDS = ("bucket", "suggested", "state", "online_scorer", "online_below")


@dataclass(frozen=True)
class TriageFilters:
    """The ingest list's filters (feedback among them) plus bucket (assigned), suggested bucket (or
    NEEDS_REVIEW), review state, and an online score: some verdict of `online_scorer` below `online_below`."""

    base: TrajectoryFilters = field(default_factory=TrajectoryFilters)
    bucket: str = ""
    suggested: str = ""
    state: str = ""
    online_scorer: str = ""
    online_below: float | None = None  # set together with online_scorer

    def is_empty(self) -> bool:
        return self == TriageFilters()

    def to_json(self) -> dict[str, Any]:
        """The set filters only, as a queue stores them."""
        data: dict[str, Any] = {}
        for name in (item.name for item in fields(TrajectoryFilters)):
            value = getattr(self.base, name)
            if value not in ("", None):
                data[name] = value.isoformat() if name in _DATE_FIELDS else value
        data.update({name: getattr(self, name) for name in _OWN_FIELDS if getattr(self, name) not in ("", None)})
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TriageFilters:
        known = {item.name for item in fields(TrajectoryFilters)}
        base = {name: value for name, value in data.items() if name in known}
        for name in _DATE_FIELDS:
            if base.get(name):
                base[name] = date.fromisoformat(base[name])
        return cls(base=TrajectoryFilters(**base), **{name: data[name] for name in _OWN_FIELDS if name in data})


def triage_queryset(filters: TriageFilters, *, viewer: User, text: bool = True) -> QuerySet[Trajectory]:
    rows = trajectory_queryset(filters.base, viewer=viewer, text=text)
    if filters.bucket:
        assigned = BucketAssignment.objects.filter(trajectory=OuterRef("pk"), bucket__slug=filters.bucket)
        rows = rows.filter(Exists(assigned))
    if filters.suggested:
        suggested = Suggestion.objects.filter(trajectory=OuterRef("pk"))
        if filters.suggested == NEEDS_REVIEW:
            suggested = suggested.filter(rule=NEEDS_REVIEW)
        else:
            suggested = suggested.filter(bucket__slug=filters.suggested)
        rows = rows.filter(Exists(suggested))
    if filters.state == ReviewState.UNREVIEWED:
        rows = rows.filter(Q(review__isnull=True) | Q(review__state=ReviewState.UNREVIEWED))
    elif filters.state:
        rows = rows.filter(review__state=filters.state)
    if filters.online_scorer and filters.online_below is not None:
        scored = OnlineScore.objects.filter(trajectory=OuterRef("pk"), scorer=filters.online_scorer,
                                            value__lt=filters.online_below)  # fmt: skip
        rows = rows.filter(Exists(scored))
    return rows


def triage_page(
    *, filters: TriageFilters, viewer: User, after: Cursor | None, size: int = 50
) -> tuple[list[Trajectory], Cursor | None]:
    """One page of the triage list, newest first, with reviews, buckets and suggestions; keyset-paginated."""
    rows = (
        triage_queryset(filters, viewer=viewer, text=False)
        .select_related("review")
        .prefetch_related(
            Prefetch("bucket_assignments", queryset=BucketAssignment.objects.select_related("bucket")),
            Prefetch("suggestions", queryset=Suggestion.objects.select_related("bucket")),
        )
    )
    lead = _triage_lead(filters) or list_lead(filters.base)
    return keyset_page(rows, after=after, size=size, text=filters.base.text, lead=lead)


def _triage_lead(filters: TriageFilters) -> CopyLead | None:
    """The triage filter that leads the page (`CopyLead`), on PostgreSQL: a bucket, a suggested one, or
    reviewed or skipped. Reviews come days after ingestion, so few of the newest trajectories match:
    the walk read about 40,000 of them for one page at 1,000,000 (migration triage 0008)."""
    if connection.vendor != "postgresql":
        return None
    bucket_id = "bucket_id = (SELECT id FROM triage_bucket WHERE slug = %s)"
    if filters.bucket:
        return CopyLead("triage_bucketassignment", bucket_id, (filters.bucket,))
    if filters.suggested == NEEDS_REVIEW:
        return CopyLead("triage_suggestion", "rule = %s", (NEEDS_REVIEW,))
    if filters.suggested:
        return CopyLead("triage_suggestion", bucket_id, (filters.suggested,))
    if filters.state in (ReviewState.REVIEWED, ReviewState.SKIPPED):
        return CopyLead("triage_review", "state = %s", (filters.state,))
    return None


def triage_ids(filters: TriageFilters, *, viewer: User) -> list[UUID]:
    """Every trajectory the filters match: what a bulk action on "everything matching" applies to."""
    return list(triage_queryset(filters, viewer=viewer).values_list("pk", flat=True))


def trajectory_ids_visible(ids: list[UUID], *, viewer: User) -> list[UUID]:
    """Those of `ids` that `viewer` may see: what a bulk action on picked rows applies to."""
    rows = Trajectory.objects.filter(agents_filter(viewer), pk__in=ids)
    return list(rows.values_list("pk", flat=True))


def bucket_list() -> list[Bucket]:
    return list(Bucket.objects.all())


def bucket_keys(buckets: list[Bucket]) -> dict[int, str]:
    """The number key of each bucket (1 to 9, then 0), in position order."""
    keys = [str(number % 10) for number in range(1, 11)]
    return {bucket.pk: key for bucket, key in zip(buckets, keys, strict=False)}


# --- queues --------------------------------------------------------------------------------


def queue_filters(queue: Queue) -> TriageFilters:
    return TriageFilters.from_json(queue.filters)


def queue_visible(*, viewer: User) -> QuerySet[Queue]:
    """The queues `viewer` may see: those whose filter names no agent, or one of theirs."""
    if sees_all_agents(viewer):
        return Queue.objects.all()
    names = list(visible_agents(viewer).values_list("name", flat=True))
    return Queue.objects.filter(~Q(filters__has_key="agent") | Q(filters__agent__in=names))


def queue_get(*, queue_id: int, viewer: User) -> Queue | None:
    return queue_visible(viewer=viewer).prefetch_related("reviewers").filter(pk=queue_id).first()


def queue_may_edit(queue: Queue, user: User) -> bool:
    """Its owner or an admin changes a queue's filter, reviewers and hand-picked items; nobody else."""
    if not user.has_perm(Perm.TRIAGE):
        return False
    return user.has_perm(Perm.MANAGE) or (queue.created_by_id is not None and queue.created_by_id == user.pk)


def queue_rules(queue: Queue) -> list[QueueRule]:
    return rules_parse(queue.rules)


def queue_may_remove(queue: Queue, user: User) -> bool:
    """Who works a queue or edits it may take an item out of it for good."""
    return queue_may_edit(queue, user) or queue_may_review(queue, user)


def queue_members(queue: Queue, *, viewer: User) -> QuerySet[Trajectory]:
    """The trajectories its filter matches (an empty filter matches none) and its items (added by hand or by
    a rule), less the items removed, of the agents `viewer` may see."""
    items = QueueItem.objects.filter(queue=queue)
    added = Q(pk__in=items.filter(removed_at__isnull=True).values("trajectory_id"))
    removed = Q(pk__in=items.filter(removed_at__isnull=False).values("trajectory_id"))
    filters = queue_filters(queue)
    visible = Trajectory.objects.filter(agents_filter(viewer))
    if filters.is_empty():
        return visible.filter(added)
    return visible.filter(Q(pk__in=triage_queryset(filters, viewer=viewer).values("pk")) | added).exclude(removed)


def queue_rule_facts(trajectory_ids: Sequence[UUID | str]) -> dict[UUID, TrajectoryFacts]:
    """What queue rules read about these trajectories, in five queries; gone ids are left out.

    The system's read for `services.queue_rules_apply`, of every agent: it takes no viewer, and
    what it returns never reaches a page.
    """
    rows = Trajectory.objects.filter(pk__in=trajectory_ids).values_list("pk", "agent__name", "outcome", "model_version")
    suggested: dict[UUID, set[str]] = {}
    for trajectory_id, slug, rule in Suggestion.objects.filter(trajectory_id__in=trajectory_ids).values_list(
        "trajectory_id", "bucket__slug", "rule"
    ):
        suggested.setdefault(trajectory_id, set()).add(NEEDS_REVIEW if rule == NEEDS_REVIEW else slug or "")
    feedback = {
        row["trajectory_id"]: (row["downs"] > 0, row["lowest"])
        for row in Feedback.objects.filter(trajectory_id__in=trajectory_ids)
        .values("trajectory_id")
        .annotate(downs=Count("pk", filter=Q(thumb=Feedback.Thumb.DOWN)), lowest=Min("score"))
    }
    online: dict[UUID, dict[str, float]] = {}
    for trajectory_id, scorer, lowest in (
        OnlineScore.objects.filter(trajectory_id__in=trajectory_ids)
        .values("trajectory_id", "scorer")
        .annotate(lowest=Min("value"))
        .values_list("trajectory_id", "scorer", "lowest")
    ):
        online.setdefault(trajectory_id, {})[scorer] = lowest
    facts = {}
    for pk, agent, outcome, version in rows:
        thumbs_down, lowest_score = feedback.get(pk, (False, None))
        facts[pk] = TrajectoryFacts(agent=agent, outcome=outcome, model_version=version,
                                    suggested=frozenset(suggested.get(pk, ())), thumbs_down=thumbs_down,
                                    lowest_score=lowest_score, online_lowest=online.get(pk, {}))  # fmt: skip
    return facts


@dataclass(frozen=True)
class QueueMember:
    """A member of a queue as its page lists it, with why it is there."""

    trajectory: Trajectory
    source: str  # its item's QueueItem.Source (hand or rule); "" when only the filter brought it
    rule: str
    added_by: str
    by_filter: bool

    @property
    def reasons(self) -> list[str]:
        found = []
        if self.source == QueueItem.Source.RULE:
            found.append(f"rule “{self.rule}”")
        elif self.source == QueueItem.Source.HAND:
            found.append(f"added by hand{f' by {self.added_by}' if self.added_by else ''}")
        if self.by_filter:
            found.append("matches the filter")
        return found


def _queue_member_rows(queue: Queue, rows: QuerySet[Trajectory], *, viewer: User) -> list[QueueMember]:
    item = QueueItem.objects.filter(queue=queue, trajectory=OuterRef("pk"), removed_at__isnull=True)
    filters = queue_filters(queue)
    matches = (
        Exists(triage_queryset(filters, viewer=viewer).filter(pk=OuterRef("pk")))
        if not filters.is_empty()
        else Value(False, output_field=BooleanField())
    )
    annotated = rows.annotate(
        item_source=Subquery(item.values("source")[:1]),
        item_rule=Subquery(item.values("rule")[:1]),
        item_added_by=Subquery(item.values("added_by__username")[:1]),
        by_filter=matches,
    )
    return [
        QueueMember(row, row.item_source or "", row.item_rule or "", row.item_added_by or "", row.by_filter)
        for row in annotated
    ]


def _member_parts(queue: Queue, *, viewer: User) -> list[QuerySet[Trajectory]]:
    """The queue's members as two sets whose union they are: its items, and what its filter matches less
    the items removed. A query that walks members (the first few in some order) walks each along an index
    and merges; one query of the union would test each row against the whole filter's set (a hashed
    subplan: every member read per view)."""
    added = QueueItem.objects.filter(queue=queue, removed_at__isnull=True).values("trajectory_id")
    parts = [Trajectory.objects.filter(agents_filter(viewer), pk__in=added)]
    filters = queue_filters(queue)
    if not filters.is_empty():
        removed = QueueItem.objects.filter(queue=queue, trajectory=OuterRef("pk"), removed_at__isnull=False)
        parts.append(triage_queryset(filters, viewer=viewer).exclude(Exists(removed)))
    return parts


def _queue_first(
    queue: Queue, *, viewer: User, where: Q, order: Sequence[str], key: Callable[[Trajectory], Any], limit: int
) -> list[UUID]:
    """The first `limit` members matching `where` in `order` (`key` sorts alike), from each part's first."""
    found: dict[UUID, Trajectory] = {}
    for part in _member_parts(queue, viewer=viewer):
        found.update((row.pk, row) for row in part.filter(where).select_related("review").order_by(*order)[:limit])
    return [row.pk for row in sorted(found.values(), key=key)[:limit]]


def queue_waiting_members(queue: Queue, *, viewer: User, limit: int = 50) -> list[QueueMember]:
    """The unreviewed members, in the order `next` hands them out, each with why it is in the queue."""
    ids = _queue_first(
        queue, viewer=viewer, where=Q(review__isnull=True) | Q(review__state=ReviewState.UNREVIEWED),
        order=("ingested_at", "pk"), key=lambda row: (row.ingested_at, row.pk), limit=limit,
    )  # fmt: skip
    waiting = Trajectory.objects.filter(pk__in=ids).select_related("agent").order_by("ingested_at", "pk")
    return _queue_member_rows(queue, waiting, viewer=viewer)


def queue_candidates(queue: Queue, *, viewer: User) -> list[QuerySet[Review]]:
    """Reviews `viewer` may be handed now, unreviewed members nobody holds, oldest first: one queryset per
    part of the queue's members (`_member_parts`); the oldest of their first rows is the next one."""
    now = timezone.now()
    return [
        Review.objects.filter(trajectory__in=part.values("pk"), state=ReviewState.UNREVIEWED)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=now))
        .order_by("trajectory__ingested_at", "trajectory_id")
        for part in _member_parts(queue, viewer=viewer)
    ]


def queue_candidates_first(queue: Queue, *, viewer: User, limit: int) -> list[Review]:
    """The first `limit` reviews `queue_candidates` would hand out, in order (each part's first, merged)."""
    found = [review for part in queue_candidates(queue, viewer=viewer)
             for review in part.select_related("trajectory")[:limit]]  # fmt: skip
    unique = {review.pk: review for review in found}.values()
    return sorted(unique, key=lambda review: (review.trajectory.ingested_at, review.trajectory_id))[:limit]


def queue_members_among(queues: Sequence[Queue], ids: Collection[UUID], *, viewer: User) -> dict[int, set[UUID]]:
    """Which of a few trajectories (`ids`) are members of each queue: looked up by id, never by walking members."""
    if not ids:
        return {queue.pk: set() for queue in queues}
    items: dict[tuple[int, UUID], bool] = {
        (queue_id, trajectory_id): removed_at is None
        for queue_id, trajectory_id, removed_at in QueueItem.objects.filter(
            queue__in=queues, trajectory_id__in=ids
        ).values_list("queue_id", "trajectory_id", "removed_at")
    }
    visible = set(Trajectory.objects.filter(agents_filter(viewer), pk__in=ids).values_list("pk", flat=True))
    found = {}
    for queue in queues:
        filters = queue_filters(queue)
        matched = set() if filters.is_empty() else set(
            triage_queryset(filters, viewer=viewer).filter(pk__in=ids).values_list("pk", flat=True)
        )  # fmt: skip
        found[queue.pk] = {
            pk for pk in visible if items.get((queue.pk, pk)) is True or (pk in matched and (queue.pk, pk) not in items)
        }
    return found


def queue_held(queue: Queue, reviewer: User) -> Review | None:
    """The member this reviewer holds a live claim on, if any: "next" hands it back first."""
    held = list(
        Review.objects.filter(state=ReviewState.UNREVIEWED, claimed_by=reviewer, claimed_until__gt=timezone.now())
        .select_related("trajectory")
        .order_by("trajectory__ingested_at", "trajectory_id")
    )  # a reviewer holds a claim or two at a time
    members = queue_members_among([queue], [review.trajectory_id for review in held], viewer=reviewer)[queue.pk]
    return next((review for review in held if review.trajectory_id in members), None)


def queue_missing_reviews(queue: Queue, *, viewer: User, limit: int) -> list[UUID]:
    """Members without a review row yet (ingested before triage, or suggestions still queued)."""
    missing: set[UUID] = set()
    for part in _member_parts(queue, viewer=viewer):
        missing.update(part.filter(review__isnull=True).values_list("pk", flat=True)[:limit])
    return sorted(missing)[:limit]


def queue_may_review(queue: Queue, user: User) -> bool:
    if not user.has_perm(Perm.TRIAGE):
        return False
    return not queue.reviewers.exists() or queue.reviewers.filter(pk=user.pk).exists()


@dataclass(frozen=True)
class QueueProgress:
    total: int
    reviewed: int
    skipped: int
    claimed: int
    counted_at: datetime | None = None  # when total, reviewed and skipped were counted; None: just now

    @property
    def remaining(self) -> int:
        return self.total - self.reviewed - self.skipped

    @property
    def percent(self) -> int:
        return round(100 * (self.reviewed + self.skipped) / self.total) if self.total else 0


def queue_progress(queue: Queue, *, viewer: User) -> QueueProgress:
    """The queue's progress counted now, over every member: for the page that says a queue is done."""
    return queue_progress_many([queue], viewer=viewer)[queue.pk]


def queue_progress_many(queues: Sequence[Queue], *, viewer: User) -> dict[int, QueueProgress]:
    """Each queue's progress counted now, in one query whatever the number of queues (a UNION ALL of their counts)."""
    live_claim = Q(review__state=ReviewState.UNREVIEWED, review__claimed_until__gt=timezone.now())
    parts = [
        queue_members(queue, viewer=viewer)
        .annotate(queue_id=Value(queue.pk, output_field=IntegerField()))
        .values("queue_id")
        .annotate(
            total=Count("pk"),
            reviewed=Count("pk", filter=Q(review__state=ReviewState.REVIEWED)),
            skipped=Count("pk", filter=Q(review__state=ReviewState.SKIPPED)),
            claimed=Count("pk", filter=live_claim),
        )
        .order_by()
        for queue in queues
    ]
    if not parts:
        return {}
    rows = parts[0].union(*parts[1:], all=True) if len(parts) > 1 else parts[0]
    found = {
        row["queue_id"]: QueueProgress(row["total"], row["reviewed"], row["skipped"], row["claimed"]) for row in rows
    }
    return {queue.pk: found.get(queue.pk, QueueProgress(0, 0, 0, 0)) for queue in queues}


# --- queue summaries: counted by beat, added up per viewer -----------------------------------


QUEUE_SUMMARY_PREFIX = "queue:"


def queue_summary_kind(queue_id: int) -> str:
    return f"{QUEUE_SUMMARY_PREFIX}{queue_id}"


def queue_counts_by_agent(queue: Queue) -> dict[UUID, dict[str, Any]]:
    """Per agent, the queue's members, those reviewed and skipped, and per reviewer (by name) the members
    they reviewed and skipped: the system's recount behind the queue's summary (`CountSummary`), of
    every agent, split by agent before any page adds up those a viewer may see."""
    members = queue_members(queue, viewer=cast(User, SYSTEM_READER))
    counts: dict[UUID, dict[str, Any]] = {}
    totals = members.values("agent_id").annotate(
        total=Count("pk"),
        reviewed=Count("pk", filter=Q(review__state=ReviewState.REVIEWED)),
        skipped=Count("pk", filter=Q(review__state=ReviewState.SKIPPED)),
    )
    for row in totals.order_by():
        counts[row["agent_id"]] = {"total": row["total"], "reviewed": row["reviewed"], "skipped": row["skipped"],
                                   "reviewers": {}}  # fmt: skip
    by_reviewer = members.filter(review__reviewer__isnull=False).values("agent_id", "review__reviewer__username")
    for done in by_reviewer.annotate(
        reviewed=Count("pk", filter=Q(review__state=ReviewState.REVIEWED)),
        skipped=Count("pk", filter=Q(review__state=ReviewState.SKIPPED)),
    ).order_by():
        counts[done["agent_id"]]["reviewers"][done["review__reviewer__username"]] = [done["reviewed"], done["skipped"]]
    return counts


def _queue_summaries(queues: Sequence[Queue], *, viewer: User) -> dict[int, tuple[list[dict[str, Any]], datetime]]:
    """Each queue's summary rows of the agents `viewer` may see, and when the oldest was counted;
    recounted now where one is missing or stale (beat was not running), as the first view after a change would."""
    kinds = {queue_summary_kind(queue.pk): queue for queue in queues}
    read = summaries_read(viewer=viewer, kinds=list(kinds))
    stale = [queue.pk for kind, queue in kinds.items() if not read[kind][1]]
    if stale:
        from flywheel.triage.services import queue_summaries_recount  # the services import this module

        queue_summaries_recount(queue_ids=stale)
        read = summaries_read(viewer=viewer, kinds=list(kinds))
    found = {}
    for kind, queue in kinds.items():
        rows, _ = read[kind]
        counted_at = min((row.counted_at for row in rows), default=timezone.now())
        found[queue.pk] = ([row.counts for row in rows], counted_at)
    return found


def _live_claims(queues: Sequence[Queue], *, viewer: User) -> dict[int, dict[str, int]]:
    """Per queue, the live claims on its members per reviewer's name: few rows (a claim per reviewer working),
    found through the claims index, then each claimed trajectory's membership."""
    claimed = dict(
        Review.objects.filter(agents_filter(viewer, "trajectory__agent"), state=ReviewState.UNREVIEWED,
                              claimed_until__gt=timezone.now(), claimed_by__isnull=False)
        .values_list("trajectory_id", "claimed_by__username")
    )  # fmt: skip
    members = queue_members_among(queues, list(claimed), viewer=viewer)
    held: dict[int, dict[str, int]] = {}
    for queue in queues:
        per_reviewer: dict[str, int] = {}
        for trajectory_id in members[queue.pk]:
            per_reviewer[claimed[trajectory_id]] = per_reviewer.get(claimed[trajectory_id], 0) + 1
        held[queue.pk] = per_reviewer
    return held


def queue_progress_counted(queues: Sequence[Queue], *, viewer: User) -> dict[int, QueueProgress]:
    """Each queue's progress for the queue list, its page and the review page: members, reviewed and
    skipped from its summary (`counted_at` says when: beat recounts every SUMMARY_REFRESH_SECONDS), and
    the live claims counted now. A fixed number of queries per queue whatever its size."""
    summaries = _queue_summaries(queues, viewer=viewer)
    held = _live_claims(queues, viewer=viewer)
    progress = {}
    for queue in queues:
        rows, counted_at = summaries[queue.pk]
        progress[queue.pk] = QueueProgress(
            total=sum(row.get("total", 0) for row in rows), reviewed=sum(row.get("reviewed", 0) for row in rows),
            skipped=sum(row.get("skipped", 0) for row in rows), claimed=sum(held[queue.pk].values()),
            counted_at=counted_at,
        )  # fmt: skip
    return progress


@dataclass(frozen=True)
class ReviewerProgress:
    username: str
    reviewed: int
    skipped: int
    holding: int


def queue_reviewers_counted(queue: Queue, *, viewer: User) -> list[ReviewerProgress]:
    """Per reviewer: members reviewed and skipped (from the queue's summary, as of its `counted_at`) and
    claims held now; the queue's assigned reviewers are always listed."""
    rows, _ = _queue_summaries([queue], viewer=viewer)[queue.pk]
    done: dict[str, list[int]] = {}
    for row in rows:
        for name, (reviewed, skipped) in row.get("reviewers", {}).items():
            total = done.setdefault(name, [0, 0])
            total[0] += reviewed
            total[1] += skipped
    held = _live_claims([queue], viewer=viewer)[queue.pk]
    names = sorted(set(done) | set(held) | {reviewer.get_username() for reviewer in queue.reviewers.all()})
    return [ReviewerProgress(name, done.get(name, [0, 0])[0], done.get(name, [0, 0])[1], held.get(name, 0))
            for name in names]  # fmt: skip


def queue_list(*, viewer: User) -> list[tuple[Queue, QueueProgress]]:
    queues = list(queue_visible(viewer=viewer).prefetch_related("reviewers"))
    progress = queue_progress_counted(queues, viewer=viewer)
    return [(queue, progress[queue.pk]) for queue in queues]


def queue_recent_members(queue: Queue, *, viewer: User, limit: int = 50) -> list[QueueMember]:
    """The members most recently reviewed or skipped, newest first, for the queue page, with why each is there."""
    ids = _queue_first(
        queue, viewer=viewer, where=Q(review__state__in=(ReviewState.REVIEWED, ReviewState.SKIPPED)),
        order=("-review__updated_at",), key=lambda row: -row.review.updated_at.timestamp(), limit=limit,
    )  # fmt: skip
    recent = (
        Trajectory.objects.filter(pk__in=ids)
        .select_related("agent", "review", "review__reviewer")
        .prefetch_related(Prefetch("bucket_assignments", queryset=BucketAssignment.objects.select_related("bucket")))
        .order_by("-review__updated_at")
    )
    return _queue_member_rows(queue, recent, viewer=viewer)


# --- the review page -----------------------------------------------------------------------


@dataclass(frozen=True)
class BucketState:
    """A bucket button on the review page: its key, whether it is on, the step it points at."""

    bucket: Bucket
    key: str | None
    checked: bool
    step_index: int | None
    suggested_step: int | None
    suggested: bool


@dataclass(frozen=True)
class ReviewPage:
    trajectory: Trajectory
    review: Review | None
    suggestions: list[Suggestion]
    assigned: list[BucketAssignment]
    buckets: list[BucketState]
    corrections: list[Correction] = field(default_factory=list)

    @property
    def human_interventions(self) -> int:
        """How many human interventions the trajectory records (each may become a preference pair)."""
        return sum(step.kind == StepKind.HUMAN_INTERVENTION for step in self.trajectory.steps.all())

    @property
    def marked_step(self) -> int | None:
        """The step the page opens marked: the first bucket's step, so "m" starts where it points."""
        return next(
            (state.step_index for state in self.buckets if state.checked and state.step_index is not None), None
        )


def review_page(*, trajectory_id: UUID, viewer: User) -> ReviewPage | None:
    """A trajectory with its steps, review, suggestions and bucket buttons.

    An unreviewed trajectory without buckets opens with its suggested buckets on (each at the
    step its first suggestion points at), so accepting suggestions is one key; otherwise the page
    shows the buckets assigned.
    """
    steps = Prefetch("steps", queryset=Step.objects.order_by("index"))
    trajectory = (
        Trajectory.objects.filter(agents_filter(viewer))
        .select_related("agent", "review", "review__reviewer", "review__claimed_by")
        .prefetch_related(steps)
        .filter(pk=trajectory_id)
        .first()
    )
    if trajectory is None:
        return None
    review = getattr(trajectory, "review", None)
    suggestions = list(Suggestion.objects.filter(trajectory=trajectory).select_related("bucket").order_by("id"))
    rows = list(BucketAssignment.objects.filter(trajectory=trajectory).select_related("bucket", "assigned_by"))
    assigned = {row.bucket_id: row for row in rows}
    first_suggested: dict[int, Suggestion] = {}
    for suggestion in suggestions:
        if suggestion.bucket_id is not None:
            first_suggested.setdefault(suggestion.bucket_id, suggestion)
    prefill = not assigned and (review is None or review.state == ReviewState.UNREVIEWED)
    buckets = bucket_list()
    keys = bucket_keys(buckets)
    states = [
        _bucket_state(bucket, keys.get(bucket.pk), assigned.get(bucket.pk), first_suggested.get(bucket.pk), prefill)
        for bucket in buckets
    ]
    corrections = list(Correction.objects.filter(trajectory=trajectory).select_related("reviewer", "task", "pair"))
    return ReviewPage(trajectory, review, suggestions, rows, states, corrections)


def _bucket_state(
    bucket: Bucket, key: str | None, assignment: BucketAssignment | None, suggestion: Suggestion | None, prefill: bool
) -> BucketState:
    suggested_step = suggestion.step_index if suggestion else None
    if assignment is not None:
        checked, step = True, assignment.step_index
    else:
        checked, step = prefill and suggestion is not None, suggested_step
    return BucketState(bucket, key, checked, step if checked else None, suggested_step, suggestion is not None)


def agent_policy_json(agent_id: UUID | None) -> dict[str, Any] | None:
    """The agent's safety policy as the trainer's JSON; None when it has none (jobs then use the default)."""
    if agent_id is None:
        return None
    stored = AgentPolicy.objects.filter(agent_id=agent_id).values_list("policy", flat=True).first()
    return dict(stored) if stored is not None else None


def agent_guardrails_json(agent_id: UUID) -> tuple[Any, Any]:
    """The agent's safety policy (None: the default) and its guardrail settings, as stored, in one query."""
    stored = AgentPolicy.objects.filter(agent_id=agent_id).values_list("policy", "guardrails").first()
    return (None, {}) if stored is None else (stored[0], stored[1])


# --- corrections ---------------------------------------------------------------------------


def correction_visible(*, viewer: User, agent_name: str = "") -> QuerySet[Correction]:
    """Corrections of the trajectories `viewer` may see (of one agent, given its name), newest first."""
    rows = Correction.objects.filter(agents_filter(viewer, "trajectory__agent"))
    if agent_name:
        rows = rows.filter(trajectory__agent__name=agent_name)
    return rows.select_related("trajectory__agent", "reviewer", "task", "pair").order_by("-created_at", "-id")


def correction_line(correction: Correction) -> dict[str, Any]:
    """A correction as one line of its JSONL export: where, what the agent did, the fix, who, and what it yielded."""
    trajectory, task = correction.trajectory, correction.task
    pair = getattr(correction, "pair", None)
    return {
        "id": correction.pk, "agent": trajectory.agent.name, "trajectory": str(trajectory.pk),
        "external_id": trajectory.external_id, "step_index": correction.step_index, "kind": correction.kind,
        "original": correction.original, "corrected": correction.corrected, "note": correction.note,
        "reviewer": correction.reviewer.get_username() if correction.reviewer else None,
        "created_at": correction.created_at.isoformat(),
        "task": {"id": str(task.pk), "split": task.split} if task else None,
        "pair": {"id": str(pair.pk), "split": pair.split} if pair else None,
    }  # fmt: skip
