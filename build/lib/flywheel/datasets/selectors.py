"""Reads of the datasets app: filtered task lists, a split's breakdown, a task's episode, snapshots,
synthetic batches and their preview.

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
from flywheel.datasets.models import (
    Environment,
    PreferencePair,
    RegressionTask,
    SyntheticBatch,
    SyntheticCandidate,
    TaskRevision,
    TaskSetSnapshot,
)
from flywheel.ingest.models import Step
from flywheel.ingest.parsers.base import RecordError
from flywheel.ingest.trace import trace_steps
from trainer.contracts import Task
from trainer.environments.replay import ExpectedAnswer, answerable_calls


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


def task_revisions(*, task: RegressionTask) -> QuerySet[TaskRevision]:
    """The task's revisions with their authors, in one query."""
    return task.revisions.select_related("author")


def task_duplicate_of(*, task: RegressionTask, viewer: User) -> RegressionTask | None:
    """The task this one repeats, if `viewer` may see it: a leakage key can match another agent's task."""
    if task.duplicate_of_id is None:
        return None
    return task_visible(viewer=viewer).filter(pk=task.duplicate_of_id).first()


def task_message_steps(*, task: RegressionTask) -> list[Step] | None:
    """The task's messages as the trace viewer shows them; None where they are not chat the viewer reads."""
    try:
        return trace_steps(task.content.get("messages") or [])
    except RecordError:
        return None


@dataclass(frozen=True)
class TaskEpisode:
    """What a task played as an episode starts from; `answers` only for the replay environment."""

    environment: str
    start_state: dict[str, Any]
    expected_state: dict[str, Any] | None
    recorded: list[dict[str, Any]] | None
    answers: list[ExpectedAnswer]


def replay_answers(*, task: RegressionTask) -> list[ExpectedAnswer]:
    """Which expected calls the replay answers with a recorded result, by the replay environment's own rule.

    A recorded call answers an expected call when the `tool_call` verifier would accept it as that
    call (`trainer.environments.replay.answerable_calls`); the others get an error observation.
    """
    return answerable_calls(Task.from_json(task.content))


def task_episode(*, task: RegressionTask) -> TaskEpisode | None:
    """The task's episode setup as the task page shows it; None for a task that is not an episode."""
    episode = task.content.get("episode")
    if episode is None:
        return None
    environment = episode.get("environment") or "the job's environment"
    replay = environment == Environment.REPLAY
    return TaskEpisode(
        environment=environment,
        start_state=episode.get("start_state") or {},
        expected_state=episode.get("expected_state"),
        recorded=(episode.get("start_state") or {}).get("recorded") if replay else None,
        answers=replay_answers(task=task) if replay else [],
    )


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


# --- preference pairs ----------------------------------------------------------------------


@dataclass(frozen=True)
class PairFilters:
    agent: str = ""
    split: str = ""
    source: str = ""


def pair_list(*, viewer: User, filters: PairFilters = PairFilters()) -> QuerySet[PreferencePair]:
    """The pairs of the agents `viewer` may see, filtered, oldest first (the order a snapshot freezes)."""
    rows = PreferencePair.objects.filter(agents_filter(viewer))
    for name, value in (("agent__name", filters.agent), ("split", filters.split), ("source", filters.source)):
        if value:
            rows = rows.filter(**{name: value})
    return rows.select_related("agent", "trajectory", "correction__reviewer").order_by("created_at", "id")


def synthetic_batch_list(*, viewer: User) -> QuerySet[SyntheticBatch]:
    return SyntheticBatch.objects.filter(agents_filter(viewer)).select_related("agent", "created_by")


def synthetic_batch_get(*, batch_id: UUID, viewer: User) -> SyntheticBatch | None:
    return synthetic_batch_list(viewer=viewer).filter(pk=batch_id).first()


@dataclass(frozen=True)
class RejectedGroup:
    filter: str
    total: int
    shown: list[SyntheticCandidate]


@dataclass(frozen=True)
class BatchPreview:
    """What a reviewer reads before accepting: the accepted variants and, per filter, the rejected ones."""

    accepted: list[SyntheticCandidate]
    accepted_total: int
    rejected: list[RejectedGroup]


def synthetic_batch_preview(*, batch: SyntheticBatch, shown: int = 200, shown_rejected: int = 20) -> BatchPreview:
    """The first `shown` accepted variants (with their seeds) and the first `shown_rejected` of each filter."""
    candidates = batch.candidates.select_related("seed_task", "task")
    totals = dict(candidates.values_list("rejected_by").annotate(total=Count("id")).values_list("rejected_by", "total"))
    rejected = [RejectedGroup(name, total, list(candidates.filter(rejected_by=name)[:shown_rejected]))
                for name, total in sorted(totals.items()) if name]  # fmt: skip
    accepted = list(candidates.filter(rejected_by="")[:shown])
    return BatchPreview(accepted=accepted, accepted_total=totals.get("", 0), rejected=rejected)
