"""Writes of the core app: the audit log, agents, API tokens (and their checks), roles and demo users."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import secrets
import time
from collections.abc import Callable, Collection
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.apps import apps as global_apps
from django.apps.registry import Apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, Group, Permission, User
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from flywheel.core.models import Agent, ApiToken, AuditEvent, Capability, CountSummary
from flywheel.core.roles import PERMISSION_DESCRIPTIONS, ROLE_PERMISSIONS, Perm, Role

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "fwk_"
ALL_SCOPES: tuple[str, ...] = tuple(ApiToken.Scope.values)
Actor = User | AnonymousUser | None


def actor_user(actor: Actor) -> User | None:
    """The signed-in user behind an actor; None for the system and anonymous callers."""
    return actor if isinstance(actor, User) else None


def audit_record(
    *, actor: Actor, action: str, target: models.Model | None = None, data: dict[str, Any] | None = None
) -> AuditEvent:
    """Append one event to the audit log; `actor=None` means the system itself."""
    user = actor_user(actor)
    event = AuditEvent(
        actor=user,
        actor_name=user.get_username() if user else "",
        action=action,
        target_type=target._meta.label if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        target_repr=str(target)[:200] if target is not None else "",
        data=data or {},
    )
    event.full_clean()
    event.save()
    return event


def tools_normalize(tools: Any) -> list[dict[str, Any]]:
    """Tool schemas in OpenAI `tools` form; bare `{name, description, parameters}` are wrapped."""
    if not isinstance(tools, list):
        raise ValidationError("tools must be a JSON list of tool schemas")
    normalized: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise ValidationError(f"tool {index} has no name")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict):
            raise ValidationError(f"tool {function['name']!r}: parameters must be a JSON Schema object")
        normalized.append(
            {
                "type": "function",
                "function": {
                    "name": function["name"],
                    "description": str(function.get("description", "")),
                    "parameters": parameters,
                },
            }
        )
    names = [tool["function"]["name"] for tool in normalized]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValidationError(f"duplicate tool names: {', '.join(duplicates)}")
    return normalized


@transaction.atomic
def agent_create(*, actor: Actor, name: str, description: str = "", tools: Any = (), environment: str = "") -> Agent:
    agent = Agent(name=name, description=description, tools=tools_normalize(list(tools)), environment=environment)
    agent.full_clean()
    agent.save()
    audit_record(actor=actor, action="agent.create", target=agent,
                 data={"tools": agent.tool_names(), "environment": agent.environment})  # fmt: skip
    return agent


@transaction.atomic
def agent_update(*, actor: Actor, agent: Agent, description: str, tools: Any, environment: str = "") -> Agent:
    agent.description = description
    agent.tools = tools_normalize(tools)
    agent.environment = environment
    agent.full_clean()
    agent.save()
    audit_record(actor=actor, action="agent.update", target=agent,
                 data={"tools": agent.tool_names(), "environment": agent.environment})  # fmt: skip
    return agent


def agent_served_recording_set(*, actor: Actor, agent: Agent, enabled: bool, sample_rate: float) -> Agent:
    """Whether the app's chat endpoint records what it serves for `agent`, and which share of it (0 to 1)."""
    agent.record_served, agent.served_sample_rate = enabled, sample_rate
    agent.full_clean()
    agent.save(update_fields=["record_served", "served_sample_rate", "updated_at"])
    audit_record(actor=actor, action="agent.served_recording", target=agent,
                 data={"enabled": enabled, "sample_rate": sample_rate})  # fmt: skip
    return agent


def agent_prices_set(*, actor: Actor, agent: Agent, input_per_million: float, output_per_million: float) -> Agent:
    """What a million input and output tokens of `agent`'s served model cost: the cost of its served answers."""
    agent.price_input_per_million, agent.price_output_per_million = input_per_million, output_per_million
    agent.full_clean()
    agent.save(update_fields=["price_input_per_million", "price_output_per_million", "updated_at"])
    audit_record(actor=actor, action="agent.prices", target=agent,
                 data={"input_per_million": input_per_million, "output_per_million": output_per_million})  # fmt: skip
    return agent


def _token_hash(secret: str) -> str:
    # Tokens carry 256 random bits, so a fast hash is enough: there is nothing to brute-force.
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiTokenRejected(Exception):
    """A bearer secret that authenticates no one; the message says why (unknown, revoked, expired...)."""


@transaction.atomic
def api_token_create(
    *, user: User, name: str, scopes: Collection[str] = ALL_SCOPES, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """A new token and its secret; the secret is returned once and never stored."""
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "the expiry must be in the future"})
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        user=user,
        name=name,
        prefix=secret[: len(TOKEN_PREFIX) + 6],
        key_hash=_token_hash(secret),
        scopes=sorted(set(scopes)),
        expires_at=expires_at,
    )
    token.full_clean()
    token.save()
    data = {"scopes": token.scopes, "expires_at": expires_at.isoformat() if expires_at else None}
    audit_record(actor=user, action="api_token.create", target=token, data=data)
    return token, secret


@transaction.atomic
def api_token_revoke(*, actor: Actor, token: ApiToken, reason: str = "") -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        data = {"user": token.user_id, **({"reason": reason} if reason else {})}
        audit_record(actor=actor, action="api_token.revoke", target=token, data=data)
    return token


@transaction.atomic
def api_token_revoke_all(*, user: AbstractBaseUser, reason: str) -> int:
    """Revoke every token `user` has not revoked yet (their password changed); how many."""
    tokens = list(ApiToken.objects.select_for_update().filter(user_id=user.pk, revoked_at__isnull=True))
    for token in tokens:
        api_token_revoke(actor=None, token=token, reason=reason)
    return len(tokens)


def _rejection(token: ApiToken) -> str | None:
    if token.revoked_at is not None:
        return "API token revoked"
    if token.is_expired:
        return "token expired"
    if not token.user.is_active:
        return "the token's user is deactivated"
    return None


def api_token_authenticate(*, secret: str) -> ApiToken:
    """The live token with this secret, its last use recorded; ApiTokenRejected says why not."""
    token = ApiToken.objects.select_related("user").filter(key_hash=_token_hash(secret)).first() if secret else None
    if token is None:
        raise ApiTokenRejected("invalid API token")
    reason = _rejection(token)
    if reason is not None:
        raise ApiTokenRejected(reason)
    now = timezone.now()
    # One write a minute per token at most, so a busy ingest client does not write per request.
    stale = now - settings.API_TOKEN_LAST_USE_RESOLUTION
    ApiToken.objects.filter(pk=token.pk).filter(
        models.Q(last_used_at__isnull=True) | models.Q(last_used_at__lt=stale)
    ).update(last_used_at=now)
    return token


def roles_sync(*, apps: Apps = global_apps) -> None:
    """Create the role groups and their permissions; `apps` may be a migration's registry."""
    group_model = apps.get_model("auth", "Group")
    permission_model = apps.get_model("auth", "Permission")
    content_type_model = apps.get_model("contenttypes", "ContentType")
    content_type, _ = content_type_model.objects.get_or_create(
        app_label=Capability._meta.app_label, model=Capability._meta.model_name
    )
    by_perm = {}
    for perm, text in PERMISSION_DESCRIPTIONS.items():
        by_perm[perm], _ = permission_model.objects.update_or_create(
            content_type=content_type, codename=perm.codename, defaults={"name": text}
        )
    for role, perms in ROLE_PERMISSIONS.items():
        group, _ = group_model.objects.get_or_create(name=role.value)
        group.permissions.set([by_perm[perm] for perm in perms])


def all_agents_grant(*, user: User) -> None:
    """Let `user` see and act on every agent's rows (an operator); members of single agents are set in the admin."""
    permission = Permission.objects.get(
        content_type__app_label=Capability._meta.app_label, codename=Perm.ALL_AGENTS.codename
    )
    user.user_permissions.add(permission)


@transaction.atomic
def demo_users_ensure(*, logins_file: Path) -> dict[str, str]:
    """One user per role, named after it; passwords are made once and kept in `logins_file`."""
    if settings.PRODUCTION:
        raise ValidationError("demo users are never created in production")
    logins: dict[str, str] = json.loads(logins_file.read_text()) if logins_file.exists() else {}
    user_model = get_user_model()
    for role in Role:
        password = logins.setdefault(role.value, secrets.token_urlsafe(9))
        user, created = user_model.objects.get_or_create(username=f"demo-{role.value}")
        # Setting the same password again would still count as a change and revoke the user's API tokens.
        if created or not user.check_password(password):
            user.set_password(password)
        user.is_staff = user.is_superuser = role is Role.ADMIN
        user.save()
        user.groups.set([Group.objects.get(name=role.value)])
        all_agents_grant(user=user)  # the demo's people see its agents, whatever their role
        if created:
            audit_record(actor=None, action="user.create_demo", target=user, data={"role": role.value})
    logins_file.parent.mkdir(parents=True, exist_ok=True)
    logins_file.write_text(json.dumps(logins, indent=2))
    logins_file.chmod(0o600)
    return {f"demo-{role}": password for role, password in logins.items()}


def outbox_send(*, send: Callable[[str], Any], model: type[models.Model], row_id: Any) -> bool:
    """Hand a committed row's message to the broker (`send(id)`, a task's `delay`) and mark the row
    dispatched; False, logged, when the broker refused: the row waits, queued, for its sweeper.

    Never raises for the broker: the row is committed already (the transactional-outbox pattern).
    """
    try:
        send(str(row_id))
    except Exception:  # any broker failure
        logger.warning(
            "%s %s stays queued: the broker did not take its message", model._meta.model_name, row_id, exc_info=True
        )
        return False
    model._default_manager.filter(pk=row_id).update(dispatched_at=timezone.now())
    return True


def outbox_due(*, since: str, resend_after: timedelta | None = None, grace: timedelta | None = None) -> Q:
    """Outbox rows whose message may be lost: never sent once `grace` has passed since their `since`
    field (a broker outage when they were written), or sent longer than `resend_after` ago."""
    now = timezone.now()
    resend = now - (resend_after if resend_after is not None else timedelta(seconds=settings.DISPATCH_RESEND_SECONDS))
    fresh = now - (grace if grace is not None else timedelta(seconds=settings.DISPATCH_GRACE_SECONDS))
    return Q(dispatched_at__isnull=True, **{f"{since}__lt": fresh}) | Q(dispatched_at__lt=resend)


def summaries_store(
    *, kind: str, counts: dict[Any, dict[str, Any]], counted_at: datetime, agent_ids: Collection[Any] | None = None
) -> None:
    """Store one recount of `kind`: `counts` per agent id, for every agent (or those of `agent_ids`); an agent
    with nothing counted gets empty counts, so that pages tell it from one never counted. Two recounts at
    once: the last wins."""
    if agent_ids is None:
        agent_ids = list(Agent.objects.values_list("pk", flat=True))
    rows = [CountSummary(agent_id=agent_id, kind=kind, counts=counts.get(agent_id, {}), counted_at=counted_at)
            for agent_id in agent_ids]  # fmt: skip
    CountSummary.objects.bulk_create(
        rows, update_conflicts=True, unique_fields=["kind", "agent"], update_fields=["counts", "counted_at"]
    )


# How long one recount may hold its key (`recount_once`), and so the longest another waits for it.
RECOUNT_HOLD_SECONDS = 60


def recount_once(key: str, recount: Callable[[], object]) -> bool:
    """Run `recount` unless another process is running the recount of `key` now: then wait until it ends
    and return False, its counts stored by then. Twenty requests that find a summary stale start one
    recount, not twenty: at a million trajectories each reads every row (6 s apiece under load,
    measured), and as many at once kept PostgreSQL's cores busy. The key is held in the cache every
    web process shares, for RECOUNT_HOLD_SECONDS at most: a holder that died is waited for that long,
    then the recount runs here (one waiter's, the others wait for it). A cache outage must not stop
    the pages: each then recounts for itself. Returns whether it ran here."""
    held = f"recount-running:{key}"
    while True:
        try:
            mine = cache.add(held, time.time() + RECOUNT_HOLD_SECONDS, timeout=RECOUNT_HOLD_SECONDS)
        except Exception:
            logger.exception("recount of %s not coordinated: the cache failed", key)
            recount()
            return True
        if mine:
            break
        if _released(held):
            return False
    try:
        recount()
    finally:
        _release(held)
    return True


def _released(held: str) -> bool:
    """Wait while `held` is held: True when its holder released it, False when it lapsed (the holder died).
    A key gone before it is first read was released: its holder finished between our add and our read."""
    lapses_at = math.inf
    try:
        while (value := cache.get(held)) is not None:
            lapses_at = float(value)
            time.sleep(0.1)
    except Exception:  # the caller reads what is stored
        logger.exception("stopped waiting for %s: the cache failed", held)
        return True
    return time.time() < lapses_at - 1  # a second's slack: the cache expires keys to the second


def _release(held: str) -> None:
    try:
        cache.delete(held)
    except Exception:  # it lapses by itself
        logger.exception("%s not released: the cache failed", held)


def summaries_drop(*, kind: str) -> None:
    """Forget a summary whose subject is gone or changed (a queue deleted or refiltered)."""
    CountSummary.objects.filter(kind=kind).delete()
