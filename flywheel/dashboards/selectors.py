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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db.models import Count, Exists, OuterRef, Q
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from flywheel.core.selectors import agents_filter
from flywheel.datasets.models import RegressionTask, Split, TaskSetSnapshot
from flywheel.ingest.models import Outcome, Trajectory
from flywheel.registry.models import GateResult, GateStatus, LivePointer, ModelVersion
from flywheel.training.models import FINISHED_STATES, Job, JobState
from flywheel.triage.models import Bucket, BucketAssignment, ReviewState, Suggestion

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


def failures_by_bucket(*, viewer: User) -> list[BucketCount]:
    """Per bucket in position order: trajectories carrying it, and those only suggested it so far."""
    unreviewed = Q(trajectory__review__isnull=True) | ~Q(trajectory__review__state=ReviewState.REVIEWED)
    visible = agents_filter(viewer, "trajectory__agent")
    assigned = dict(
        BucketAssignment.objects.filter(visible)
        .values("bucket")
        .annotate(n=Count("trajectory"))
        .values_list("bucket", "n")
    )
    awaiting = dict(
        Suggestion.objects.filter(visible, unreviewed, bucket__isnull=False)
        .values("bucket")
        .annotate(n=Count("trajectory", distinct=True))
        .values_list("bucket", "n")
    )
    return [
        BucketCount(bucket.name, bucket.colour, assigned.get(bucket.pk, 0), awaiting.get(bucket.pk, 0))
        for bucket in Bucket.objects.all()
    ]


def _grouped(field: str, *, viewer: User, limit: int) -> list[GroupCount]:
    rows = (
        Trajectory.objects.filter(agents_filter(viewer))
        .values(field)
        .annotate(failures=Count("pk", filter=Q(outcome=Outcome.FAILURE)), total=Count("pk"))
        .order_by("-failures", field)[:limit]
    )
    return [GroupCount(str(row[field]) or "(none)", row["failures"], row["total"]) for row in rows]


def failures_by_agent(*, viewer: User, limit: int = 20) -> list[GroupCount]:
    return _grouped("agent__name", viewer=viewer, limit=limit)


def failures_by_model_version(*, viewer: User, limit: int = 20) -> list[GroupCount]:
    return _grouped("model_version", viewer=viewer, limit=limit)


def failures_by_day(*, viewer: User, days: int = 30) -> list[DayCount]:
    """Failed trajectories per day (started, else ingested) over the last `days`, split by bucket."""
    since = timezone.now() - timedelta(days=days)
    failures = (
        Trajectory.objects.filter(agents_filter(viewer), outcome=Outcome.FAILURE)
        .annotate(day=TruncDate(Coalesce("started_at", "ingested_at")))
        .filter(day__gte=since.date())
    )
    bucketed = Exists(BucketAssignment.objects.filter(trajectory=OuterRef("pk")))
    rows: list[DayCount] = []
    for row in failures.filter(~bucketed).values("day").annotate(n=Count("pk")).order_by("day"):
        rows.append(DayCount(row["day"], NOT_BUCKETED, "#ced4da", row["n"]))
    per_bucket = (
        failures.filter(bucket_assignments__isnull=False)
        .values("day", "bucket_assignments__bucket__name", "bucket_assignments__bucket__colour")
        .annotate(n=Count("pk"))
        .order_by("day")
    )
    for row in per_bucket:
        name, colour = row["bucket_assignments__bucket__name"], row["bucket_assignments__bucket__colour"]
        rows.append(DayCount(row["day"], name, colour, row["n"]))
    return rows


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
