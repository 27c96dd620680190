"""Reads of the core app."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import QuerySet

from flywheel.core.models import Agent, ApiToken, AuditEvent


def audit_event_list(*, action: str = "", actor: str = "", target_type: str = "") -> QuerySet[AuditEvent]:
    events = AuditEvent.objects.all()
    if action:
        events = events.filter(action__startswith=action)
    if actor:
        events = events.filter(actor_name=actor)
    if target_type:
        events = events.filter(target_type=target_type)
    return events


def audit_action_names() -> list[str]:
    return list(AuditEvent.objects.order_by("action").values_list("action", flat=True).distinct())


def agent_list() -> QuerySet[Agent]:
    return Agent.objects.all()


def api_token_list(*, user: User) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user)


def user_role_names(*, user: User) -> list[str]:
    return list(user.groups.order_by("name").values_list("name", flat=True))
