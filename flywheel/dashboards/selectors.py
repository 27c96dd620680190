"""Reads behind the dashboard charts: failures per bucket, agent, model version and day.

Each returns plain dataclasses for `charts.py`; nothing here knows about plotly. A trajectory
"failed" when its outcome is failure; a bucket's count is the trajectories carrying it, whatever
their outcome (a reviewer who buckets a trajectory says it failed).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

from django.db.models import Count, Exists, OuterRef, Q
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from flywheel.ingest.models import Outcome, Trajectory
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


def failures_by_bucket() -> list[BucketCount]:
    """Per bucket in position order: trajectories carrying it, and those only suggested it so far."""
    unreviewed = Q(trajectory__review__isnull=True) | ~Q(trajectory__review__state=ReviewState.REVIEWED)
    assigned = dict(
        BucketAssignment.objects.values("bucket").annotate(n=Count("trajectory")).values_list("bucket", "n")
    )
    awaiting = dict(
        Suggestion.objects.filter(unreviewed, bucket__isnull=False)
        .values("bucket")
        .annotate(n=Count("trajectory", distinct=True))
        .values_list("bucket", "n")
    )
    return [
        BucketCount(bucket.name, bucket.colour, assigned.get(bucket.pk, 0), awaiting.get(bucket.pk, 0))
        for bucket in Bucket.objects.all()
    ]


def _grouped(field: str, *, limit: int) -> list[GroupCount]:
    rows = (
        Trajectory.objects.values(field)
        .annotate(failures=Count("pk", filter=Q(outcome=Outcome.FAILURE)), total=Count("pk"))
        .order_by("-failures", field)[:limit]
    )
    return [GroupCount(str(row[field]) or "(none)", row["failures"], row["total"]) for row in rows]


def failures_by_agent(*, limit: int = 20) -> list[GroupCount]:
    return _grouped("agent__name", limit=limit)


def failures_by_model_version(*, limit: int = 20) -> list[GroupCount]:
    return _grouped("model_version", limit=limit)


def failures_by_day(*, days: int = 30) -> list[DayCount]:
    """Failed trajectories per day (started, else ingested) over the last `days`, split by bucket."""
    since = timezone.now() - timedelta(days=days)
    failures = (
        Trajectory.objects.filter(outcome=Outcome.FAILURE)
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
