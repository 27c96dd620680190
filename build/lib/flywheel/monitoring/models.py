"""Monitoring rows: online scoring rules, the scores they store, and regression alerts.

A `ScoringRule` belongs to an agent: which of its trajectories it scores (a filter, a sample
rate) and with which scorers (`scorers.py`). An `OnlineScore` is one scorer's verdict on one
trajectory under one rule, stored once (unique per trajectory, scorer and rule); deleting a rule
keeps its scores, which the monitor still counts. An `Alert` says that a live version does worse
than its predecessor on one monitored rate; at most one is open per agent, version and rate.
A `JudgeRequest` is a trajectory a rule's `judge` scorer sampled, waiting for (or sent to) a judge
job; one per rule and trajectory, kept once answered so the trajectory is never judged twice.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from flywheel.core.models import Agent, TimestampedModel, UUIDModel
from flywheel.ingest.models import Outcome, Trajectory
from flywheel.monitoring import scorers
from flywheel.registry.models import Deployment, ModelVersion
from flywheel.training.models import Job


class Scorer(models.TextChoices):
    SAFETY = scorers.SAFETY, "Safety policy"
    SCHEMA = scorers.SCHEMA, "Arguments valid against the tool's schema"
    CATALOGUE = scorers.CATALOGUE, "Tool in the agent's catalogue"
    JUDGE = scorers.JUDGE, "The agent's LLM judge (a judge job on the gpu queue)"


class ScoringRule(TimestampedModel):
    """Which of an agent's trajectories to score online, at which sample rate, with which scorers."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="scoring_rules")
    name = models.CharField(max_length=100)
    # The filter: every field that is set must match (empty matches anything).
    model_version = models.CharField(max_length=100, blank=True, help_text="A model version tag, e.g. support-bot:v3.")
    outcome = models.CharField(max_length=16, choices=Outcome.choices, blank=True)
    tool = models.CharField(max_length=200, blank=True, help_text="Trajectories that call this tool.")
    bucket = models.SlugField(
        max_length=50, blank=True, help_text="Trajectories in this failure bucket, assigned or suggested."
    )
    sample_rate = models.FloatField(
        default=1.0, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="The share of matching trajectories scored, 0 to 1; the same ones on every run.",
    )  # fmt: skip
    scorers = models.JSONField(default=list, help_text="The scorers' names: safety, schema, catalogue, judge.")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["agent", "name"]
        constraints = [models.UniqueConstraint(fields=["agent", "name"], name="scoring_rule_agent_name")]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        names = self.scorers if isinstance(self.scorers, list) else []
        unknown = [repr(name) for name in names if name not in Scorer.values]
        if not names or unknown or len(set(names)) != len(names):
            refused = f"; unknown: {', '.join(unknown)}" if unknown else ""
            raise ValidationError({"scorers": f"name each of {', '.join(Scorer.values)} at most once{refused}"})


class OnlineScore(models.Model):
    """A scorer's verdict on a live trajectory: value 1 for a pass, 0 for a fail, and why."""

    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="online_scores")
    rule = models.ForeignKey(ScoringRule, null=True, blank=True, on_delete=models.SET_NULL, related_name="scores")
    scorer = models.CharField(max_length=32, choices=Scorer.choices)
    value = models.FloatField()
    passed = models.BooleanField()
    detail = models.JSONField(default=dict, blank=True, help_text="What the scorer found: rules broken, steps.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["scorer", "created_at"]
        constraints = [
            models.UniqueConstraint(fields=["trajectory", "scorer", "rule"], name="online_score_unique"),
        ]
        indexes = [models.Index(fields=["scorer", "passed", "trajectory"], name="online_score_verdict")]

    def __str__(self) -> str:
        return f"{self.scorer} {'pass' if self.passed else 'fail'} on {self.trajectory_id}"


class JudgeRequestState(models.TextChoices):
    WAITING = "waiting", "Waiting for a judge job"
    SENT = "sent", "In a judge job"
    SCORED = "scored", "Scored"
    UNREADABLE = "unreadable", "The judge's reply had no score"
    FAILED = "failed", "Its judge jobs failed"


class JudgeRequest(models.Model):
    """A trajectory a rule's `judge` scorer sampled: waiting for a judge job, in one, or answered."""

    rule = models.ForeignKey(ScoringRule, on_delete=models.CASCADE, related_name="judge_requests")
    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="judge_requests")
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    state = models.CharField(max_length=16, choices=JudgeRequestState.choices, default=JudgeRequestState.WAITING)
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Judge jobs it was sent in.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["rule", "trajectory"], name="judge_request_unique")]
        indexes = [models.Index(fields=["state", "rule"], name="judge_request_state")]

    def __str__(self) -> str:
        return f"judge {self.trajectory_id} ({self.state})"


class MonitoredRate(models.TextChoices):
    SUCCESS = "success", "Success rate"
    UNSAFE = "unsafe", "Unsafe-action rate"
    INVALID_CALL = "invalid_call", "Invalid-call rate"
    NEGATIVE_FEEDBACK = "negative_feedback", "Negative feedback"


class Alert(UUIDModel):
    """A live version significantly worse than its predecessor on one rate; open until resolved."""

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="alerts")
    version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="alerts")
    predecessor = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="+")
    rate = models.CharField(max_length=24, choices=MonitoredRate.choices)
    # The rate is events / total over each version's window (e.g. unsafe trajectories / safety-scored ones).
    live_events = models.IntegerField()
    live_total = models.IntegerField()
    predecessor_events = models.IntegerField()
    predecessor_total = models.IntegerField()
    p_value = models.FloatField(help_text="One-sided two-proportion z-test: the live version is worse.")
    opened_at = models.DateTimeField(auto_now_add=True, db_index=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolution = models.CharField(max_length=200, blank=True)
    rollback = models.ForeignKey(
        Deployment, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="The rollback that resolved it, when one did.",
    )  # fmt: skip

    class Meta:
        ordering = ["-opened_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "version", "rate"], condition=models.Q(resolved_at__isnull=True),
                name="alert_one_open_per_rate",
            ),
        ]  # fmt: skip

    def __str__(self) -> str:
        return f"{self.version} worse than {self.predecessor} on {self.get_rate_display().lower()}"

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None

    @property
    def live_rate(self) -> float:
        return self.live_events / self.live_total if self.live_total else 0.0

    @property
    def predecessor_rate(self) -> float:
        return self.predecessor_events / self.predecessor_total if self.predecessor_total else 0.0
