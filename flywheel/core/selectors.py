"""Reads of the core app, and the one place that decides which agents' rows a user may see.

Per-agent access: a user sees an agent's rows when they are one of its members (directly, or
through a team: a Django group the agent lists), or when they hold the all-agents grant
(`Perm.ALL_AGENTS`: operators; the admin role carries it, superusers have every permission).
Rows that belong to no agent (a null agent) are for all-agents users only. Every selector that
returns agent data filters with `agents_filter` (or `visible_agents`); roles say what a user may
do, this says on which agent's data.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Model, Q, QuerySet
from django.forms import BaseForm
from django.utils import timezone

from flywheel.core.models import Agent, ApiToken, AuditEvent, CountSummary
from flywheel.core.roles import Perm

Viewer = User | AnonymousUser
AnyForm = TypeVar("AnyForm", bound=BaseForm)


# --- Per-agent access -------------------------------------------------------------------------


class _SystemReader(AnonymousUser):
    """The app itself reading every agent's rows for a recount that is split by agent before any page
    shows it (`CountSummary`): the all-agents grant and no other permission."""

    def has_perm(self, perm: str, obj: object = None) -> bool:
        return perm == Perm.ALL_AGENTS


SYSTEM_READER = _SystemReader()


def sees_all_agents(user: Viewer) -> bool:
    """Whether `user` holds the all-agents grant (has_perm answers True for active superusers)."""
    return user.has_perm(Perm.ALL_AGENTS)


def _member_agent_ids(user: Viewer) -> QuerySet[Agent, Any]:
    """The ids of the agents `user` is a member of, directly or through a team, as a subquery."""
    if not user.is_authenticated:
        return Agent.objects.none().values("pk")
    return Agent.objects.filter(Q(members=user) | Q(teams__user=user)).values("pk")


def visible_agents(user: Viewer) -> QuerySet[Agent]:
    """The agents whose rows `user` may see and act on."""
    if sees_all_agents(user):
        return Agent.objects.all()
    return Agent.objects.filter(pk__in=_member_agent_ids(user))


def agents_filter(user: Viewer, field: str = "agent") -> Q:
    """A filter on `field` (a foreign key to Agent, or a path to one) keeping the rows `user` may see.

    The agents are read here, one small query, and the filter holds their ids: as a subquery,
    PostgreSQL joined the memberships again for every row a list walks (at a million trajectories,
    half of a 140 ms walk of 10,000 rows)."""
    if sees_all_agents(user):
        return Q()
    return Q(**{f"{field}__in": list(_member_agent_ids(user).values_list("pk", flat=True))})


def agent_names_filter(user: Viewer, field: str = "agent_name") -> Q:
    """The same filter for rows that name their agent instead of pointing at it."""
    if sees_all_agents(user):
        return Q()
    return Q(**{f"{field}__in": visible_agents(user).values("name")})


def agent_get(*, viewer: Viewer, name: str) -> Agent | None:
    """The agent called `name` if `viewer` may see it: None alike for no such agent and for another's."""
    return visible_agents(viewer).filter(name=name).first()


def ingest_agent_names(*, user: Viewer) -> frozenset[str] | None:
    """The agents `user` may ingest into; None for any, new ones included (creating agents is for all-agents users)."""
    if sees_all_agents(user):
        return None
    return frozenset(visible_agents(user).values_list("name", flat=True))


def ingest_refusal(*, user: Viewer, agent_name: str) -> str | None:
    """Why `user` may not ingest into `agent_name` (one message for unknown and foreign agents); None when they may."""
    allowed = ingest_agent_names(user=user)
    if allowed is None or agent_name in allowed:
        return None
    return f"agent {agent_name!r}: not an agent you are a member of"


def _agent_path(model: type[Model]) -> str | None:
    """The lookup from `model` to its agent ("pk" for Agent itself); None when its rows have no agent."""
    if model is Agent:
        return "pk"
    fields = {field.name: field for field in model._meta.get_fields()}
    if getattr(fields.get("agent"), "related_model", None) is Agent:
        return "agent"
    snapshot = getattr(fields.get("snapshot"), "related_model", None)
    if snapshot is not None and _agent_path(snapshot) == "agent":
        return "snapshot__agent"
    return None


def choices_limit(form: AnyForm, *, viewer: Viewer) -> AnyForm:
    """Narrow the form's model choices (agents, and rows of an agent) to those `viewer` may see:
    the form then neither lists another agent's rows nor accepts one."""
    for field in form.fields.values():
        queryset = getattr(field, "queryset", None)
        if queryset is None:
            continue
        path = _agent_path(queryset.model)
        if path is not None:
            field.queryset = queryset.filter(agents_filter(viewer, path))  # type: ignore[attr-defined]
    return form


# --- The rest of core -------------------------------------------------------------------------


def audit_event_list(
    *, viewer: Viewer, action: str = "", actor: str = "", target_type: str = ""
) -> QuerySet[AuditEvent]:
    """The audit log; a user without the all-agents grant reads only their own actions (events name any agent)."""
    events = AuditEvent.objects.all()
    if not sees_all_agents(viewer):
        events = events.filter(actor_id=viewer.pk) if viewer.is_authenticated else events.none()
    if action:
        events = events.filter(action__startswith=action)
    if actor:
        events = events.filter(actor_name=actor)
    if target_type:
        events = events.filter(target_type=target_type)
    return events


def audit_action_names() -> list[str]:
    return list(AuditEvent.objects.order_by("action").values_list("action", flat=True).distinct())


def agent_list(*, viewer: Viewer) -> QuerySet[Agent]:
    return visible_agents(viewer)


def api_token_list(*, user: User) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user)


def user_role_names(*, user: User) -> list[str]:
    return list(user.groups.order_by("name").values_list("name", flat=True))


# --- Count summaries --------------------------------------------------------------------------


def summaries_read(*, viewer: Viewer, kinds: Sequence[str]) -> dict[str, tuple[list[CountSummary], bool]]:
    """Per kind, the summaries of the agents `viewer` may see, and whether every one of those agents has
    one counted within SUMMARY_STALE_SECONDS (False: the caller recounts; beat keeps them fresher)."""
    found: dict[str, list[CountSummary]] = {kind: [] for kind in kinds}
    for row in CountSummary.objects.filter(agents_filter(viewer), kind__in=kinds):
        found[row.kind].append(row)
    agents = visible_agents(viewer).count()
    oldest = timezone.now() - timedelta(seconds=settings.SUMMARY_STALE_SECONDS)
    return {
        kind: (rows, len(rows) == agents and all(row.counted_at >= oldest for row in rows))
        for kind, rows in found.items()
    }
