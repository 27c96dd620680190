"""Failure buckets (the guide's seven plus custom ones), reviews, suggestions, queues, corrections and safety
policies."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from flywheel.core.models import Agent, TimestampedModel
from flywheel.ingest.models import Trajectory

# The guide's failure modes, in its order; created by a data migration (again after a flush:
# `services.on_post_migrate`) and never deleted.
BUILT_IN_BUCKETS: list[tuple[str, str, str, str]] = [
    ("format_error", "Format error", "Malformed output or tool call: invalid JSON, missing arguments.", "#e8590c"),
    ("wrong_tool", "Wrong tool", "A tool was called that does not serve the request.", "#f59f00"),
    ("bad_planning", "Bad planning", "Steps in the wrong order, redundant or missing steps.", "#7048e8"),
    ("unsafe_action", "Unsafe action", "An action the policy forbids or that needed confirmation first.", "#c92a2a"),
    ("retrieval_failure", "Retrieval failure", "The needed information was not found or was ignored.", "#1c7ed6"),
    ("hallucinated_api", "Hallucinated API", "A call to a tool or argument that does not exist.", "#d6336c"),
    ("incomplete_execution", "Incomplete execution", "Left unfinished, often after a tool error.", "#495057"),
]


class Bucket(TimestampedModel):
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    colour = models.CharField(
        max_length=7, default="#868e96", validators=[RegexValidator(r"^#[0-9a-fA-F]{6}$", "a colour such as #1c7ed6")]
    )
    built_in = models.BooleanField(default=False)
    position = models.PositiveSmallIntegerField(default=100, help_text="Order on pages and number-key shortcuts.")

    class Meta:
        ordering = ["position", "name"]

    def __str__(self) -> str:
        return self.name


class ReviewState(models.TextChoices):
    UNREVIEWED = "unreviewed", "Unreviewed"
    REVIEWED = "reviewed", "Reviewed"
    SKIPPED = "skipped", "Skipped"


class Review(TimestampedModel):
    """A trajectory's review: its state, who reviewed it, the note, and who holds it right now."""

    trajectory = models.OneToOneField(Trajectory, on_delete=models.CASCADE, related_name="review")
    state = models.CharField(max_length=16, choices=ReviewState.choices, default=ReviewState.UNREVIEWED)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.TextField(blank=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    # A claim hands the trajectory to one reviewer of a queue until it expires, so abandoned ones come back.
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    claimed_until = models.DateTimeField(null=True, blank=True)
    suggested_at = models.DateTimeField(null=True, blank=True, help_text="When suggestions were last computed.")

    class Meta:
        indexes = [
            models.Index(fields=["state", "claimed_until"], name="review_state_claim"),
            # The queue page's "recently reviewed" walks these newest first instead of sorting every member.
            models.Index(
                fields=["-updated_at"], condition=models.Q(state__in=["reviewed", "skipped"]), name="review_done_recent"
            ),
        ]

    def __str__(self) -> str:
        return f"review of {self.trajectory_id}"


class BucketAssignment(models.Model):
    """One bucket on a trajectory, optionally pointing at the step where the failure shows."""

    class Source(models.TextChoices):
        HUMAN = "human", "Reviewer"
        SUGGESTION = "suggestion", "Accepted suggestion"

    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="bucket_assignments")
    bucket = models.ForeignKey(Bucket, on_delete=models.PROTECT, related_name="assignments")
    step_index = models.IntegerField(null=True, blank=True)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.HUMAN)
    rule = models.CharField(max_length=100, blank=True, help_text="The suggestion's rule, when one was accepted.")
    assigned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["bucket__position", "bucket__name"]
        constraints = [models.UniqueConstraint(fields=["trajectory", "bucket"], name="assignment_unique_bucket")]
        indexes = [models.Index(fields=["bucket", "trajectory"], name="assignment_bucket")]

    def __str__(self) -> str:
        return f"{self.bucket_id} on {self.trajectory_id}"


class Suggestion(models.Model):
    """What a rule of `suggestions.py` found: a bucket (or none: "needs review"), why, and where."""

    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="suggestions")
    bucket = models.ForeignKey(Bucket, null=True, blank=True, on_delete=models.CASCADE, related_name="suggestions")
    rule = models.CharField(max_length=100)
    reason = models.TextField()
    step_index = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["trajectory", "id"]
        indexes = [models.Index(fields=["bucket", "trajectory"], name="suggestion_bucket")]

    def __str__(self) -> str:
        return f"{self.rule} on {self.trajectory_id}"


class Queue(TimestampedModel):
    """A saved filter, plus trajectories its rules or a person added, that assigned reviewers work through."""

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    # `selectors.TriageFilters` as JSON; an empty filter matches nothing, so a queue can be hand-picked only.
    filters = models.JSONField(default=dict, blank=True)
    # `queue_rules.rules_parse`'s JSON: arriving trajectories any rule matches join as items (source "rule").
    rules = models.JSONField(default=list, blank=True)
    reviewers = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="triage_queues", help_text="Nobody: open to every reviewer."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class QueueItem(models.Model):
    """A trajectory added to a queue by hand or by a rule, on top of those its filter matches; or one removed.

    A removed item stays as a tombstone (`removed_at`): the unique pair keeps rules from adding the
    trajectory again, and the queue's members exclude it even where its filter matches. Removing a
    trajectory that only the filter matched leaves a tombstone of source "filter".
    """

    class Source(models.TextChoices):
        HAND = "hand", "Added by hand"
        RULE = "rule", "Added by a rule"
        FILTER = "filter", "Matched the filter"

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="items")
    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="+")
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.HAND)
    rule = models.CharField(max_length=100, blank=True, help_text="The rule's name, for an item a rule added.")
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    added_at = models.DateTimeField(auto_now_add=True)
    removed_at = models.DateTimeField(null=True, blank=True)
    removed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["queue", "trajectory"], name="queue_item_unique")]

    def __str__(self) -> str:
        return f"{self.trajectory_id} in {self.queue_id}"


class AgentPolicy(TimestampedModel):
    """An agent's safety policy (trainer's `SafetyPolicy` JSON) and its guardrails; without one, the defaults.

    `guardrails` says what the served chat endpoint does with a returned tool call that breaks
    each rule (`flywheel.triage.guardrails`): block it, flag it, or not check it.
    """

    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, related_name="safety_policy")
    policy = models.JSONField(help_text="A trainer.verifiers.safety.SafetyPolicy as JSON.")
    guardrails = models.JSONField(
        default=dict, blank=True,
        help_text='What the served endpoint does per rule: {"default": "flag", "rules": {"rule-id": "block"}}; '
                  "actions block, flag, off. Empty: flag every rule.",
    )  # fmt: skip
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        verbose_name_plural = "agent policies"

    def __str__(self) -> str:
        return f"safety policy of {self.agent}"


class CorrectionKind(models.TextChoices):
    CALL = "call", "A tool call"
    ANSWER = "answer", "An answer"


class Correction(TimestampedModel):
    """A reviewer's fix of a failing step, beside what the agent did there, and what the fix became.

    `original` is the agent's turn at the step as recorded (an assistant message: its tool calls or
    its text); `corrected` the reviewer's (an assistant message with one tool call, arguments as an
    object, or an answer text). It may yield a train task (an SFT example), a held-out regression
    task and a preference pair (`datasets.PreferencePair.correction`).
    """

    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="corrections")
    step_index = models.IntegerField(help_text="The first step of the agent's turn that was wrong.")
    kind = models.CharField(max_length=8, choices=CorrectionKind.choices)
    original = models.JSONField()
    corrected = models.JSONField()
    note = models.TextField(blank=True)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="corrections"
    )
    task = models.ForeignKey(
        "datasets.RegressionTask", null=True, blank=True, on_delete=models.SET_NULL, related_name="corrections",
        help_text="The task it yielded: a train task is an SFT example, a held-out one a regression task.",
    )  # fmt: skip

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"correction of {self.trajectory_id} step {self.step_index}"
