"""Reads of the datasets app: filtered task lists, a split's breakdown, snapshots.

Every read takes the viewer and keeps to the agents they may see; tasks and snapshots of no
agent are for all-agents users (`flywheel.core.selectors`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db.models import Count, QuerySet

from flywheel.core.selectors import agents_filter
from flywheel.datasets.models import RegressionTask, TaskSetSnapshot


@dataclass(frozen=True)
class TaskFilters:
    split: str = ""
    bucket: str = ""
    source_kind: str = ""
    environment: str = ""
    agent: str = ""
    text: str = ""


def task_visible(*, viewer: User) -> QuerySet[RegressionTask]:
    return RegressionTask.objects.filter(agents_filter(viewer))


def task_get(*, task_id: UUID, viewer: User) -> RegressionTask | None:
    return task_visible(viewer=viewer).select_related("agent", "bucket").filter(pk=task_id).first()


def task_duplicate_of(*, task: RegressionTask, viewer: User) -> RegressionTask | None:
    """The task this one repeats, if `viewer` may see it: a leakage key can match another agent's task."""
    if task.duplicate_of_id is None:
        return None
    return task_visible(viewer=viewer).filter(pk=task.duplicate_of_id).first()


def task_list(*, filters: TaskFilters, viewer: User) -> QuerySet[RegressionTask]:
    tasks = task_visible(viewer=viewer).select_related("agent", "bucket")
    for field, value in (
        ("split", filters.split), ("bucket__slug", filters.bucket), ("source_kind", filters.source_kind),
        ("environment", filters.environment), ("agent__name", filters.agent),
    ):  # fmt: skip
        if value:
            tasks = tasks.filter(**{field: value})
    if filters.text:
        tasks = tasks.filter(external_id__icontains=filters.text) | tasks.filter(leakage_text__icontains=filters.text)
    return tasks.order_by("split", "external_id")


def split_breakdown(*, tasks: QuerySet[RegressionTask]) -> dict[str, Any]:
    """Counts per split, bucket, category and expected tool, for the set pages."""
    tools: Counter[str] = Counter()
    for content in tasks.values_list("content", flat=True).iterator(chunk_size=500):
        tools.update(call["name"] for call in content.get("expected_calls", []))
        if content.get("no_call_expected"):
            tools["(no call expected)"] += 1
    return {
        "splits": dict(tasks.values_list("split").annotate(n=Count("id")).order_by("split")),
        "buckets": list(tasks.values_list("bucket__name").annotate(n=Count("id")).order_by("-n")),
        "categories": list(tasks.values_list("category").annotate(n=Count("id")).order_by("-n")[:30]),
        "tools": tools.most_common(30),
        "flagged": tasks.filter(duplicate_of__isnull=False).count(),
    }


def snapshot_list(*, viewer: User) -> QuerySet[TaskSetSnapshot]:
    return TaskSetSnapshot.objects.filter(agents_filter(viewer)).select_related("agent", "created_by")


def snapshot_get(*, snapshot_id: UUID, viewer: User) -> TaskSetSnapshot | None:
    return snapshot_list(viewer=viewer).filter(pk=snapshot_id).first()


def snapshot_breakdown(*, snapshot: TaskSetSnapshot) -> dict[str, Any]:
    items = snapshot.items.all()
    tools: Counter[str] = Counter()
    for content in items.values_list("content", flat=True):
        tools.update(call["name"] for call in content.get("expected_calls", []))
    return {
        "buckets": list(items.values_list("bucket").annotate(n=Count("id")).order_by("-n")),
        "categories": list(items.values_list("category").annotate(n=Count("id")).order_by("-n")),
        "tools": tools.most_common(30),
    }
