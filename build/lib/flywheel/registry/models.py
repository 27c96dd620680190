"""Registry rows: model versions, gate policies and results, deployments, the live pointer, served answers,
replays of failing steps.

Nothing here is ever deleted (PROTECT everywhere, no delete in the admin): the versions and
the deployments are the history of what served each agent. The exception is `ServedExchange`, an
outbox row that lives only until its answer is stored as a trajectory. One live version per agent is
the unique `LivePointer.agent`; the services change it under a row lock on the agent.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from flywheel.core.models import Agent, TimestampedModel, UUIDModel
from flywheel.training.models import Job


class ModelVersion(UUIDModel, TimestampedModel):
    """A trained adapter of an agent, copied into the registry's storage under its sha256."""

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="model_versions")
    number = models.PositiveIntegerField()
    base_model = models.CharField(max_length=500)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    training_job = models.OneToOneField(
        Job, null=True, blank=True, on_delete=models.PROTECT, related_name="model_version"
    )
    snapshot_hash = models.CharField(max_length=64, blank=True, help_text="The train snapshot's content hash.")
    heldout_snapshot_hash = models.CharField(max_length=64, blank=True)
    config = models.JSONField(default=dict, blank=True, help_text="The training job's kind and hyperparameters.")
    metrics = models.JSONField(default=dict, blank=True, help_text="The training job's final metrics.")
    adapter_sha256 = models.CharField(max_length=64, help_text="sha256 of adapter_model.safetensors.")
    config_sha256 = models.CharField(max_length=64, help_text="sha256 of adapter_config.json.")
    storage_path = models.CharField(max_length=500, help_text="The adapter folder, relative to the registry root.")
    registered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["agent", "-number"]
        constraints = [models.UniqueConstraint(fields=["agent", "number"], name="model_version_agent_number")]

    def __str__(self) -> str:
        return self.tag

    @property
    def tag(self) -> str:
        """The model version tag trajectories carry, e.g. `support-bot:v3`."""
        return f"{self.agent.name}:v{self.number}"

    @property
    def serve_name(self) -> str:
        """A LoRA module name for vLLM's `--lora-modules NAME=PATH` (no colon, one per version)."""
        return f"{self.agent.name}-v{self.number}"


class GatePolicy(TimestampedModel):
    """An agent's promotion criteria: the fields of `trainer.gate.Policy` that differ from the defaults."""

    agent = models.OneToOneField(Agent, on_delete=models.PROTECT, related_name="gate_policy", primary_key=True)
    policy = models.JSONField(default=dict, blank=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    def __str__(self) -> str:
        return f"gate policy of {self.agent}"


class GateStatus(models.TextChoices):
    PENDING = "pending", "Running"
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"
    ERROR = "error", "Did not finish"


class GateResult(UUIDModel, TimestampedModel):
    """A gate job's comparison of a candidate with a baseline (a version, or the base model when null)."""

    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="gate_result")
    candidate = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="gate_results")
    baseline = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="baseline_gate_results"
    )
    status = models.CharField(max_length=8, choices=GateStatus.choices, default=GateStatus.PENDING, db_index=True)
    policy = models.JSONField(default=dict, blank=True, help_text="The policy the gate applied.")
    decision = models.JSONField(default=dict, blank=True, help_text="passed, summary and each criterion's reason.")
    report = models.JSONField(
        default=dict, blank=True, help_text="Both models' metrics (overall, per bucket, regression) and per-task flips."
    )
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        against = self.baseline.tag if self.baseline else "base model"
        return f"gate of {self.candidate} against {against}: {self.get_status_display()}"

    @property
    def passed(self) -> bool:
        return self.status == GateStatus.PASSED

    @property
    def criteria(self) -> list[dict[str, object]]:
        return list(self.decision.get("criteria", []))


class DeploymentAction(models.TextChoices):
    PROMOTE = "promote", "Promote"
    ROLLBACK = "rollback", "Roll back"


class Deployment(UUIDModel):
    """One change of an agent's live version: who, when, from what, to what, why, and on which gate."""

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="deployments")
    action = models.CharField(max_length=8, choices=DeploymentAction.choices)
    from_version = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    to_version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="deployments")
    to_sha256 = models.CharField(max_length=64, help_text="The adapter sha256 that went live.")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    # Kept apart from `actor` so the record survives the user's deletion.
    actor_name = models.CharField(max_length=150)
    reason = models.TextField(blank=True)
    override = models.BooleanField(default=False, help_text="Promoted without a passed gate, on a written reason.")
    gate_result = models.ForeignKey(
        GateResult, null=True, blank=True, on_delete=models.PROTECT, related_name="deployments"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        origin = self.from_version.tag if self.from_version else "nothing"
        return f"{self.get_action_display()} {origin} → {self.to_version.tag}"


class LivePointer(models.Model):
    """The version that serves an agent now; the unique agent column allows one per agent."""

    agent = models.OneToOneField(Agent, on_delete=models.PROTECT, related_name="live_pointer", primary_key=True)
    version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="+")
    deployment = models.ForeignKey(Deployment, on_delete=models.PROTECT, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.agent} → {self.version.tag}"


class ServedExchange(UUIDModel):
    """A served chat completion waiting to be stored as a trajectory: the outbox row of its recording task.

    Written once the answer has gone out (by the thread that served it), deleted once its trajectory is
    stored; a row whose message was
    never sent, or sent long ago, is re-sent by the sweeper (`services.served_sweep`).
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    record = models.JSONField(help_text="The answered exchange as an openai-chat record (`traffic.served_record`).")
    created_at = models.DateTimeField(auto_now_add=True)
    dispatched_at = models.DateTimeField(
        null=True, blank=True, help_text="When its recording message was last handed to the broker."
    )

    class Meta:
        indexes = [models.Index(fields=["dispatched_at", "created_at"], name="served_exchange_dispatch")]

    def __str__(self) -> str:
        return str(self.record.get("id", self.pk))


class ReplayStatus(models.TextChoices):
    PENDING = "pending", "Running"
    DONE = "done", "Answered"
    ERROR = "error", "Did not finish"


class Replay(UUIDModel, TimestampedModel):
    """A trajectory's failing step answered again by a version (`flywheel.registry.replay`), with both answers' scores.

    One replay per trajectory, version and step, unless an earlier one did not finish: greedy
    decoding would answer the same again, so a second launch returns the first.
    """

    trajectory = models.ForeignKey("ingest.Trajectory", on_delete=models.CASCADE, related_name="replays")
    version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="replays")
    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="replay")
    step_index = models.PositiveIntegerField(help_text="The failing step: the conversation was cut just before it.")
    was_live = models.BooleanField(help_text="Whether the version was the live one when the replay was launched.")
    expected_source = models.CharField(
        max_length=300, blank=True, help_text="Where the expected answer came from (a task); empty: none is known."
    )
    status = models.CharField(max_length=8, choices=ReplayStatus.choices, default=ReplayStatus.PENDING, db_index=True)
    answer = models.TextField(blank=True, help_text="What the version answered.")
    scores = models.JSONField(default=dict, blank=True, help_text="The answer's scores (trainer.verifiers.answer).")
    original_scores = models.JSONField(
        null=True, blank=True, help_text="The recorded answer's scores, by the same checks; null when it had none."
    )
    usage = models.JSONField(default=dict, blank=True, help_text="Tokens, latency and whether the answer finished.")
    error = models.TextField(blank=True)
    launched_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["trajectory", "version", "step_index"], condition=~models.Q(status="error"),
                name="replay_one_per_version_and_step",
            ),
        ]  # fmt: skip

    def __str__(self) -> str:
        return f"replay of step {self.step_index} by {self.version}: {self.get_status_display()}"

    @property
    def case(self) -> dict[str, Any]:
        """What was sent: the conversation, the tools, the recorded answer (`original`) and the expected one."""
        return dict(self.job.cases[0]) if self.job.cases else {}

    @property
    def ended_unrecorded(self) -> bool:
        """Still pending though its job ended: its `job_finished` receiver was refused (see the audit log)."""
        return self.status == ReplayStatus.PENDING and self.job.is_finished
