"""Reads of the ingest app: the filtered trajectory list with keyset pagination, one trace, uploads.

Every read takes the viewer and keeps to the agents they may see (`flywheel.core.selectors`).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from uuid import UUID

from django.contrib.auth.models import User
from django.db.models import Exists, OuterRef, Prefetch, Q, QuerySet, TextField, Value
from django.db.models.functions import Concat
from django.utils import timezone

from flywheel.core.selectors import agent_names_filter, agents_filter, sees_all_agents
from flywheel.ingest.models import Feedback, Step, Trajectory, Upload

FEEDBACK_ANY = "any"
# How many of the newest rows a text search reads before it turns to the trigram index (keyset_page).
TEXT_PROBE_ROWS = 500
# A tool called in at most this many steps is filtered by its trajectories' ids (`_tool_filter`).
RARE_TOOL_STEPS = 1000


@dataclass(frozen=True)
class TrajectoryFilters:
    outcome: str = ""
    agent: str = ""
    model_version: str = ""
    tool: str = ""
    has_error: bool | None = None
    since: date | None = None
    until: date | None = None
    text: str = ""
    feedback: str = ""  # "up" or "down": with a thumb so; FEEDBACK_ANY: with any feedback


@dataclass(frozen=True)
class Cursor:
    """Where a page ends, in the list's order (newest first): keyset pagination, no OFFSET or COUNT."""

    ingested_at: datetime
    id: UUID

    def encode(self) -> str:
        return base64.urlsafe_b64encode(f"{self.ingested_at.isoformat()}|{self.id}".encode()).decode()

    @classmethod
    def decode(cls, token: str) -> Cursor | None:
        try:
            stamp, _, ident = base64.urlsafe_b64decode(token.encode()).decode().partition("|")
            return cls(datetime.fromisoformat(stamp), UUID(ident))
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None


def _day_start(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


def trajectory_queryset(filters: TrajectoryFilters, *, viewer: User, text: bool = True) -> QuerySet[Trajectory]:
    """The trajectories `viewer` may see that match `filters`; without the text filter when `text` is False
    (`keyset_page` applies it itself, newest rows first)."""
    rows = Trajectory.objects.select_related("agent").filter(agents_filter(viewer))
    if filters.outcome:
        rows = rows.filter(outcome=filters.outcome)
    if filters.agent:
        rows = rows.filter(agent__name=filters.agent)
    if filters.model_version:
        rows = rows.filter(model_version=filters.model_version)
    if filters.has_error is not None:
        rows = rows.filter(has_error=filters.has_error)
    if filters.since:
        rows = rows.filter(ingested_at__gte=_day_start(filters.since))
    if filters.until:
        rows = rows.filter(ingested_at__lt=_day_start(filters.until + timedelta(days=1)))
    if filters.tool:
        rows = rows.filter(_tool_filter(filters.tool))
    if filters.text and text:
        rows = rows.filter(search_text__icontains=filters.text)
    if filters.feedback:
        given = Feedback.objects.filter(trajectory=OuterRef("pk"))
        if filters.feedback != FEEDBACK_ANY:
            given = given.filter(thumb=filters.feedback)
        rows = rows.filter(Exists(given))
    return rows.defer("search_text", "metadata", "final_result")


def _tool_filter(tool: str) -> Q:
    """The trajectories with a step calling `tool`. A rare tool's few trajectories are looked up by id: the
    newest-first walk with a per-row test would read every trajectory before finding that none (or few) match.
    Up to RARE_TOOL_STEPS of its steps are read from the (tool_name, trajectory) index to tell."""
    calls = list(Step.objects.filter(tool_name=tool).values_list("trajectory_id", flat=True)[: RARE_TOOL_STEPS + 1])
    if len(calls) <= RARE_TOOL_STEPS:
        return Q(pk__in=set(calls))
    return Q(Exists(Step.objects.filter(trajectory=OuterRef("pk"), tool_name=tool)))


def trajectory_page(
    *, filters: TrajectoryFilters, viewer: User, after: Cursor | None, size: int = 50
) -> tuple[list[Trajectory], Cursor | None]:
    """One page of the list and the cursor of the next one (None on the last page)."""
    rows = trajectory_queryset(filters, viewer=viewer, text=False)
    return keyset_page(rows, after=after, size=size, text=filters.text)


def keyset_page(
    rows: QuerySet[Trajectory], *, after: Cursor | None, size: int, text: str = ""
) -> tuple[list[Trajectory], Cursor | None]:
    """Newest first from `after` on, by (ingested_at, id): no OFFSET, so deep pages cost what the first does.

    With `text`, the rows containing it: see `_text_page`.
    """
    if after is not None:
        rows = rows.filter(Q(ingested_at__lt=after.ingested_at) | Q(ingested_at=after.ingested_at, id__lt=after.id))
    ordered = rows.order_by("-ingested_at", "-id")
    page = _text_page(ordered, text=text, size=size) if text else list(ordered[: size + 1])
    if len(page) <= size:
        return page, None
    last = page[size - 1]
    return page[:size], Cursor(last.ingested_at, last.id)


def _text_page(ordered: QuerySet[Trajectory], *, text: str, size: int) -> list[Trajectory]:
    """The first `size + 1` of `ordered` containing `text`: among the newest TEXT_PROBE_ROWS rows first.

    A common word fills the page from those rows. Through the trigram index PostgreSQL would reread
    every row holding it (it cannot tell how many), seconds for a word in half the trajectories. A
    rarer text falls back to the index, which then hands over few rows. Both give the same page:
    the newest rows are all read before any older one could be listed.
    """
    newest = list(ordered.values_list("ingested_at", flat=True)[:TEXT_PROBE_ROWS])
    if not newest:
        return []
    # The same test as icontains, on an expression the trigram index does not cover.
    unindexed = Concat("search_text", Value(""), output_field=TextField())
    probe = ordered.alias(probe_text=unindexed).filter(ingested_at__gte=newest[-1], probe_text__icontains=text)
    page: list[Trajectory] = list(probe[: size + 1])
    if len(page) <= size:
        page = list(ordered.filter(search_text__icontains=text)[: size + 1])
    return page


def trajectory_visible(*, viewer: User) -> QuerySet[Trajectory]:
    """The trajectories `viewer` may see, unfiltered otherwise: the start of any read of one by id."""
    return Trajectory.objects.filter(agents_filter(viewer))


def trajectory_with_steps(*, trajectory_id: UUID, viewer: User) -> Trajectory | None:
    steps = Prefetch("steps", queryset=Step.objects.order_by("index"))
    rows = trajectory_visible(viewer=viewer).select_related("agent", "upload").prefetch_related(steps, "feedback")
    return rows.filter(pk=trajectory_id).first()


def trajectory_by_external_id(*, external_id: str, agent_name: str, source: str, viewer: User) -> list[Trajectory]:
    """Those `viewer` may see with this external id (in that agent and source, where named): two at most."""
    rows = trajectory_visible(viewer=viewer).filter(external_id=external_id)
    if agent_name:
        rows = rows.filter(agent__name=agent_name)
    if source:
        rows = rows.filter(source=source)
    return list(rows[:2])


def upload_visible(*, viewer: User) -> QuerySet[Upload]:
    """Uploads into an agent `viewer` may see; one that names no agent (its records do) only to its uploader."""
    if sees_all_agents(viewer):
        return Upload.objects.all()
    return Upload.objects.filter(
        (~Q(agent_name="") & agent_names_filter(viewer)) | Q(agent_name="", uploaded_by_id=viewer.pk)
    )


def upload_get(*, upload_id: UUID, viewer: User) -> Upload | None:
    return upload_visible(viewer=viewer).filter(pk=upload_id).first()


def upload_recent(*, viewer: User, limit: int = 20) -> QuerySet[Upload]:
    return upload_visible(viewer=viewer).select_related("uploaded_by")[:limit]
