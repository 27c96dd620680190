"""Reads behind the dashboard charts and the home page's tiles.

Charts: failures per bucket, agent, model version and day. Each returns plain dataclasses for
`charts.py`; nothing here knows about plotly. A trajectory "failed" when its outcome is failure;
a bucket's count is the trajectories carrying it, whatever their outcome (a reviewer who buckets
a trajectory says it failed).

Home page: tasks per split, jobs running and queued, and each agent's live version with the
held-out rates of its gate. A fixed number of queries whatever the number of agents; the gate
reports' per-task rows are never loaded, only both models' overall rates.

Every count and chart is of the agents the viewer may see (`flywheel.core.selectors`): another
agent's numbers never reach a page.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from flywheel.core.models import Agent, CountSummary
from flywheel.core.selectors import agents_filter, summaries_read
from flywheel.datasets.models import RegressionTask, Split, TaskSetSnapshot
from flywheel.ingest.models import Outcome, Trajectory
from flywheel.registry.models import GateResult, GateStatus, LivePointer, ModelVersion
from flywheel.training.models import FINISHED_STATES, Job, JobState
from flywheel.triage.models import Bucket, BucketAssignment, Review, ReviewState, Suggestion
from flywheel.triage.selectors import queue_visible

NOT_BUCKETED = "not bucketed"


@dataclass(frozen=True)
class BucketCount:
    name: str
    colour: str
    assigned: int
    awaiting: int  # suggested for trajectories not reviewed yet


@dataclass(frozen=True)
class GroupCount:
    label: str
    failures: int
    total: int


@dataclass(frozen=True)
class DayCount:
    day: date
    series: str  # a bucket's name, or NOT_BUCKETED
    colour: str
    count: int


DASHBOARD_KIND = "dashboard"
DASHBOARD_DAYS = 30  # the failures-over-time chart's window


def dashboard_counts_by_agent(*, days: int = DASHBOARD_DAYS) -> dict[UUID, dict[str, Any]]:
    """Per agent: its trajectories and failures, per model version, per bucket (carrying it; suggested it
    and not reviewed yet), failures per day of the last `days` per bucket ("" for none), unreviewed
    failures and reviewed trajectories. The system's recount behind the "dashboard" `CountSummary`,
    of every agent, split by agent before any page adds up those a viewer may see. Keys are strings (JSON)."""
    counts: dict[UUID, dict[str, Any]] = defaultdict(
        lambda: {
            "trajectories": 0,
            "failures": 0,
            "unreviewed_failures": 0,
            "reviewed": 0,
            "versions": {},
            "buckets": {},
            "days": {},
        }  # fmt: skip
    )
    # Over columns of the index that covers the count only (an id would send it to the table).
    per_version = Trajectory.objects.values("agent_id", "model_version").annotate(
        failures=Count("outcome", filter=Q(outcome=Outcome.FAILURE)), total=Count("*")
    )
    for row in per_version.order_by():
        agent = counts[row["agent_id"]]
        agent["trajectories"] += row["total"]
        agent["failures"] += row["failures"]
        agent["versions"][row["model_version"]] = [row["failures"], row["total"]]
    unreviewed = Q(review__isnull=True) | Q(review__state=ReviewState.UNREVIEWED)
    for agent_id, n in _per_agent(Trajectory.objects.filter(unreviewed, outcome=Outcome.FAILURE), "agent_id"):
        counts[agent_id]["unreviewed_failures"] = n
    for agent_id, n in _per_agent(Review.objects.filter(state=ReviewState.REVIEWED), "trajectory__agent_id"):
        counts[agent_id]["reviewed"] = n
    assigned = BucketAssignment.objects.values("trajectory__agent_id", "bucket_id").annotate(n=Count("trajectory"))
    for carried in assigned.order_by():
        bucket = counts[carried["trajectory__agent_id"]]["buckets"].setdefault(str(carried["bucket_id"]), [0, 0])
        bucket[0] = carried["n"]
    not_reviewed = Q(trajectory__review__isnull=True) | ~Q(trajectory__review__state=ReviewState.REVIEWED)
    awaiting = (
        Suggestion.objects.filter(not_reviewed, bucket__isnull=False)
        .values("trajectory__agent_id", "bucket_id")
        .annotate(n=Count("trajectory", distinct=True))
    )
    for suggested in awaiting.order_by():
        bucket = counts[suggested["trajectory__agent_id"]]["buckets"].setdefault(str(suggested["bucket_id"]), [0, 0])
        bucket[1] = suggested["n"]
    for agent_id, day, bucket_id, n in _failures_per_day(days=days):
        counts[agent_id]["days"].setdefault(day.isoformat(), {})[str(bucket_id or "")] = n
    return dict(counts)


def _per_agent(rows: QuerySet[Any], field: str) -> list[tuple[UUID, int]]:
    return list(rows.values(field).annotate(n=Count("pk")).order_by().values_list(field, "n"))


def _failures_per_day(*, days: int) -> list[tuple[UUID, date, int | None, int]]:
    """Failed trajectories per agent and day (started, else ingested) over the last `days`, per bucket
    (None: carrying none; a trajectory with two buckets counts in both)."""
    since = timezone.now() - timedelta(days=days)
    failures = (
        Trajectory.objects.filter(outcome=Outcome.FAILURE)
        .annotate(day=TruncDate(Coalesce("started_at", "ingested_at")))
        .filter(day__gte=since.date())
    )
    bucketed = Exists(BucketAssignment.objects.filter(trajectory=OuterRef("pk")))
    rows: list[tuple[UUID, date, int | None, int]] = [
        (row["agent_id"], row["day"], None, row["n"])
        for row in failures.filter(~bucketed).values("agent_id", "day").annotate(n=Count("pk")).order_by()
    ]
    per_bucket = (
        failures.filter(bucket_assignments__isnull=False)
        .values("agent_id", "day", "bucket_assignments__bucket_id")
        .annotate(n=Count("pk"))
        .order_by()
    )
    rows += [(row["agent_id"], row["day"], row["bucket_assignments__bucket_id"], row["n"]) for row in per_bucket]
    return rows


@dataclass(frozen=True)
class DashboardCounts:
    """The dashboard summaries of the agents a viewer may see, and when the oldest of them was counted."""

    rows: list[CountSummary]
    counted_at: datetime


def dashboard_counts(*, viewer: User) -> DashboardCounts:
    """The "dashboard" summaries of the agents `viewer` may see (beat recounts them every
    SUMMARY_REFRESH_SECONDS); recounted now where one is missing or stale."""
    rows, fresh = summaries_read(viewer=viewer, kinds=[DASHBOARD_KIND])[DASHBOARD_KIND]
    if not fresh:
        from flywheel.dashboards.services import dashboard_summaries_recount  # services import this module

        dashboard_summaries_recount()
        rows, _ = summaries_read(viewer=viewer, kinds=[DASHBOARD_KIND])[DASHBOARD_KIND]
    return DashboardCounts(rows, min((row.counted_at for row in rows), default=timezone.now()))


def failures_by_bucket(counted: DashboardCounts) -> list[BucketCount]:
    """Per bucket in position order: trajectories carrying it, and those only suggested it so far."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in counted.rows:
        for bucket_id, (assigned, awaiting) in row.counts.get("buckets", {}).items():
            totals[bucket_id][0] += assigned
            totals[bucket_id][1] += awaiting
    buckets = Bucket.objects.all()
    return [BucketCount(bucket.name, bucket.colour, *totals.get(str(bucket.pk), [0, 0])) for bucket in buckets]


def _top(groups: dict[str, list[int]], limit: int) -> list[GroupCount]:
    ordered = sorted(groups.items(), key=lambda item: (-item[1][0], item[0]))[:limit]
    return [GroupCount(name or "(none)", failures, total) for name, (failures, total) in ordered]


def failures_by_agent(counted: DashboardCounts, *, limit: int = 20) -> list[GroupCount]:
    names = dict(Agent.objects.filter(pk__in=[row.agent_id for row in counted.rows]).values_list("pk", "name"))
    groups = {names[row.agent_id]: [row.counts.get("failures", 0), row.counts.get("trajectories", 0)]
              for row in counted.rows if row.counts.get("trajectories")}  # fmt: skip
    return _top(groups, limit)


def failures_by_model_version(counted: DashboardCounts, *, limit: int = 20) -> list[GroupCount]:
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in counted.rows:
        for tag, (failures, total) in row.counts.get("versions", {}).items():
            groups[tag][0] += failures
            groups[tag][1] += total
    return _top(groups, limit)


def failures_by_day(counted: DashboardCounts, *, days: int = DASHBOARD_DAYS) -> list[DayCount]:
    """Failed trajectories per day (started, else ingested) over the last `days` (at most DASHBOARD_DAYS),
    split by bucket: those carrying none first."""
    since = (timezone.now() - timedelta(days=days)).date().isoformat()
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for row in counted.rows:
        for day, per_bucket in row.counts.get("days", {}).items():
            if day >= since:
                for bucket_id, n in per_bucket.items():
                    totals[(bucket_id, day)] += n
    buckets = {str(bucket.pk): bucket for bucket in Bucket.objects.all()}
    by_day = sorted(totals.items(), key=lambda item: item[0][1])
    rows = [DayCount(date.fromisoformat(day), NOT_BUCKETED, "#ced4da", n) for (bucket, day), n in by_day if not bucket]
    for (bucket_id, day), n in by_day:
        if bucket_id and bucket_id in buckets:
            rows.append(DayCount(date.fromisoformat(day), buckets[bucket_id].name, buckets[bucket_id].colour, n))
    return rows


@dataclass(frozen=True)
class HomeCounts:
    """The home page's tiles: trajectories, failures, unreviewed failures and reviewed trajectories (as of
    `counted_at`), and the review queues."""

    trajectories: int
    failures: int
    unreviewed_failures: int
    reviewed: int
    queues: int
    counted_at: datetime


def home_counts(counted: DashboardCounts, *, viewer: User) -> HomeCounts:
    def total(name: str) -> int:
        return sum(row.counts.get(name, 0) for row in counted.rows)

    return HomeCounts(total("trajectories"), total("failures"), total("unreviewed_failures"), total("reviewed"),
                      queue_visible(viewer=viewer).count(), counted.counted_at)  # fmt: skip


# --- The home page: tasks per split, jobs, live versions and their gates ---------------------


@dataclass(frozen=True)
class TaskCounts:
    train: int
    heldout: int
    snapshots: int


def task_counts(*, viewer: User) -> TaskCounts:
    """Regression tasks per split, and how many snapshots were taken of them."""
    counts = RegressionTask.objects.filter(agents_filter(viewer)).aggregate(
        train=Count("pk", filter=Q(split=Split.TRAIN)), heldout=Count("pk", filter=Q(split=Split.HELDOUT))
    )
    snapshots = TaskSetSnapshot.objects.filter(agents_filter(viewer)).count()
    return TaskCounts(counts["train"], counts["heldout"], snapshots)


@dataclass(frozen=True)
class JobCounts:
    running: int
    queued: int
    last_finished: Job | None  # with its agent; only the columns the tile shows


def job_counts(*, viewer: User) -> JobCounts:
    """Jobs running and queued now, and the one that finished last."""
    jobs = Job.objects.filter(agents_filter(viewer))
    counts = jobs.aggregate(
        running=Count("pk", filter=Q(state=JobState.RUNNING)), queued=Count("pk", filter=Q(state=JobState.QUEUED))
    )
    last = (
        jobs.filter(state__in=FINISHED_STATES, finished_at__isnull=False)
        .select_related("agent")
        .only("kind", "state", "finished_at", "agent__name")
        .order_by("-finished_at")
        .first()
    )
    return JobCounts(counts["running"], counts["queued"], last)


@dataclass(frozen=True)
class GateRate:
    """One model's rate on the gate metric over the held-out tasks, with its bootstrap 95% interval."""

    value: float | None
    low: float | None
    high: float | None

    @classmethod
    def of(cls, entry: object) -> GateRate:
        entry = entry if isinstance(entry, Mapping) else {}
        return cls(*(_number(entry.get(key)) for key in ("value", "low", "high")))

    @property
    def spread(self) -> float | None:
        return self.high - self.low if self.high is not None and self.low is not None else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class GateSummary:
    pk: UUID
    passed: bool
    metric: str  # correct_arguments or execution_success
    against: str  # the baseline's tag, or "base model"
    candidate: GateRate
    baseline: GateRate

    @property
    def metric_label(self) -> str:
        return self.metric.replace("_", " ")

    @property
    def gain(self) -> float | None:
        after, before = self.candidate.value, self.baseline.value
        return after - before if after is not None and before is not None else None


@dataclass(frozen=True)
class LiveVersion:
    version: ModelVersion
    promoted_at: datetime
    override: bool  # promoted without a passed gate
    gate: GateSummary | None  # the gate it was promoted on, else its latest passed, else latest finished


def live_versions(*, viewer: User) -> list[LiveVersion]:
    """Each agent's live version, by agent name, with the held-out rates of its gate against the baseline."""
    visible = LivePointer.objects.filter(agents_filter(viewer)).select_related("version__agent", "deployment")
    pointers = list(visible.order_by("agent__name"))
    gates = _finished_gates(version_ids=[pointer.version_id for pointer in pointers])
    return [
        LiveVersion(
            version=pointer.version, promoted_at=pointer.deployment.created_at, override=pointer.deployment.override,
            gate=_chosen_gate(gates.get(pointer.version_id, []), promoted_on=pointer.deployment.gate_result_id),
        )
        for pointer in pointers
    ]  # fmt: skip


def _finished_gates(*, version_ids: Sequence[UUID]) -> dict[UUID, list[GateSummary]]:
    """Finished gates per candidate, newest first; one query, reading only the reports' overall rates."""
    rows = (
        GateResult.objects.filter(candidate_id__in=version_ids, status__in=(GateStatus.PASSED, GateStatus.FAILED))
        .annotate(candidate_overall=KeyTransform("overall", KeyTransform("candidate", "report")),
                  baseline_overall=KeyTransform("overall", KeyTransform("baseline", "report")))
        .values("pk", "candidate_id", "status", "policy", "baseline__number", "baseline__agent__name",
                "candidate_overall", "baseline_overall")
        .order_by("-created_at")
    )  # fmt: skip
    gates: dict[UUID, list[GateSummary]] = {}
    for row in rows:
        gates.setdefault(row["candidate_id"], []).append(_gate_summary(row))
    return gates


def _gate_summary(row: Mapping[str, Any]) -> GateSummary:
    metric = str((row["policy"] or {}).get("metric") or "correct_arguments")
    baseline = row["baseline__agent__name"]
    return GateSummary(
        pk=row["pk"], passed=row["status"] == GateStatus.PASSED, metric=metric,
        against=f"{baseline}:v{row['baseline__number']}" if baseline else "base model",
        candidate=GateRate.of((row["candidate_overall"] or {}).get(f"{metric}_rate")),
        baseline=GateRate.of((row["baseline_overall"] or {}).get(f"{metric}_rate")),
    )  # fmt: skip


def _chosen_gate(gates: Sequence[GateSummary], *, promoted_on: UUID | None) -> GateSummary | None:
    for gate in gates:
        if gate.pk == promoted_on:
            return gate
    return next((gate for gate in gates if gate.passed), gates[0] if gates else None)
