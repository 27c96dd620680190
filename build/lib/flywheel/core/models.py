"""Core rows: base models, agents, API tokens, the audit log, and the permission holder."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from flywheel.core.environments import allowed_environment
from flywheel.core.roles import PERMISSION_DESCRIPTIONS


class UUIDModel(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)

    class Meta:
        abstract = True


class TimestampedModel(models.Model):
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class Capability(models.Model):
    """Holds the role permissions of `roles.py`; it has no table and no rows."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [(perm.codename, text) for perm, text in PERMISSION_DESCRIPTIONS.items()]

    def __str__(self) -> str:
        return "capability"


class Agent(UUIDModel, TimestampedModel):
    """An agent whose trajectories, tasks and model versions these are."""

    class ToolsSource(models.TextChoices):
        UPLOADED = "uploaded", "Uploaded schemas"
        INFERRED = "inferred", "Inferred from observed calls"

    name = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    # OpenAI `tools` form: [{"type": "function", "function": {"name", "description", "parameters"}}]
    tools = models.JSONField(default=list, blank=True)
    tools_source = models.CharField(max_length=16, choices=ToolsSource.choices, default=ToolsSource.UPLOADED)
    # Where the agent's tasks run as episodes; a job of the agent that names none gets it in its spec.
    environment = models.CharField(
        max_length=500, blank=True, validators=[allowed_environment],
        help_text="Where this agent's tasks run as episodes: workbench, replay, or a Python entry point or MCP "
                  "server the operator allows (TRAINER_ENVIRONMENTS); empty for none.",
    )  # fmt: skip
    # The app's own chat endpoint records what it serves as trajectories (flywheel.registry.traffic).
    record_served = models.BooleanField(
        default=True, help_text="Store each chat completion the app serves for this agent as a trajectory."
    )
    served_sample_rate = models.FloatField(
        default=1.0, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="The share of served chat completions stored, 0 to 1.",
    )  # fmt: skip
    # The cost of a served answer (`Trajectory.cost`): its reported usage at these prices. Zero for
    # a local model unless someone sets what its tokens cost.
    price_input_per_million = models.FloatField(
        default=0.0, validators=[MinValueValidator(0.0)],
        help_text="The price of a million input (prompt) tokens of this agent's served model; 0 for a local model.",
    )  # fmt: skip
    price_output_per_million = models.FloatField(
        default=0.0, validators=[MinValueValidator(0.0)],
        help_text="The price of a million output (completion) tokens of this agent's served model.",
    )  # fmt: skip
    # Who sees and acts on the agent's rows (`selectors.agents_filter`), besides all-agents users.
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="member_agents",
        help_text="Users who see and act on this agent's data (users with access to every agent do anyway).",
    )
    teams = models.ManyToManyField(
        "auth.Group", blank=True, related_name="agents", help_text="Groups whose every user is a member."
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def tool_names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.tools]


class ApiToken(UUIDModel):
    """A per-user bearer token; only its SHA-256 is stored, the secret is shown once.

    It acts with its user's roles, narrowed to its scopes, until it expires or is revoked (by
    hand, or by a change of its user's password); a deactivated user's tokens answer nothing.
    """

    class Scope(models.TextChoices):
        INGEST = "ingest", "send trajectories and traces"
        READ = "read", "read the live versions, ask them through chat completions"
        TRAIN = "train", "launch jobs"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="The first characters, to recognise a token.")
    key_hash = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list, help_text="What the token may do: a list of ingest, read, train.")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: the token never expires.")
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def clean(self) -> None:
        scopes = self.scopes if isinstance(self.scopes, list) else []
        unknown = [repr(scope) for scope in scopes if scope not in self.Scope.values]
        if not scopes or unknown:
            refused = f"; unknown: {', '.join(unknown)}" if unknown else ""
            raise ValidationError({"scopes": f"give one or more of {', '.join(self.Scope.values)}{refused}"})

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and not self.is_expired

    def allows(self, scope: str) -> bool:
        return scope in self.scopes


class AuditEvent(UUIDModel):
    """One thing someone did; written only through `services.audit_record`."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Kept apart from `actor` so the record survives the user's deletion.
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=100, db_index=True)
    target_type = models.CharField(max_length=100, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    target_repr = models.CharField(max_length=200, blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["target_type", "target_id"])]

    def __str__(self) -> str:
        return f"{self.actor_name or 'system'} {self.action} {self.target_repr}".strip()


class CountSummary(models.Model):
    """Counts over every row of one agent (its dashboards' counts, or its members of one queue), recounted
    in the background (beat), so that a page adds up a few of these instead of counting per view.

    `kind` names what was counted ("dashboard", "queue:<id>"); `counts` is that recount's JSON, per
    agent so that a viewer's total adds up only the agents they may see. Pages say when they were counted.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=64)
    counts = models.JSONField(default=dict)
    counted_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "agent"], name="count_summary_unique")]

    def __str__(self) -> str:
        return f"{self.kind} of {self.agent_id}"
