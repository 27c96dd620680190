"""Trajectories as they were logged, their steps, end users' feedback on them, and the uploads that brought them in."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from flywheel.core.models import Agent, TimestampedModel, UUIDModel


class Outcome(models.TextChoices):
    SUCCESS = "success", "Success"
    FAILURE = "failure", "Failure"
    UNKNOWN = "unknown", "Unknown"


class StepKind(models.TextChoices):
    SYSTEM = "system", "System"
    USER = "user", "User"
    ASSISTANT = "assistant", "Assistant"
    TOOL_CALL = "tool_call", "Tool call"
    TOOL_RESULT = "tool_result", "Tool result"
    HUMAN_INTERVENTION = "human_intervention", "Human intervention"
    ERROR = "error", "Error"


class Upload(UUIDModel, TimestampedModel):
    """A file of trajectories and what its processing found, line by line."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued, waiting for a worker"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        PARTIAL = "partial", "Partly read"  # reading stopped partway (a read error, a truncated gzip): see failure
        FAILED = "failed", "Failed"

    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    file = models.FileField(upload_to="uploads/%Y/%m/")
    original_name = models.CharField(max_length=255)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    format = models.CharField(max_length=32, help_text="A parser name, or 'auto' to detect per record.")
    mapping = models.JSONField(default=dict, blank=True)
    agent_name = models.CharField(max_length=100, blank=True)
    source = models.CharField(max_length=100, blank=True)
    redact_patterns = models.JSONField(default=list, blank=True, help_text="Built-in redaction pattern names.")
    redact_custom = models.JSONField(default=list, blank=True, help_text="Custom redaction regexes.")
    redactions = models.IntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Workers that have claimed it so far.")
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="When its worker last committed progress; stale means lost."
    )
    dispatched_at = models.DateTimeField(
        null=True, blank=True, help_text="When its processing message was last handed to the broker."
    )
    # How far the file was read, committed with each batch: a resumed run continues after `read` records.
    lines_read = models.IntegerField(
        default=0, help_text="The line of the last record committed; a resumed run continues after it."
    )
    bytes_read = models.BigIntegerField(default=0)
    read = models.IntegerField(default=0)
    stored = models.IntegerField(default=0)
    duplicates = models.IntegerField(default=0)
    rejected = models.IntegerField(default=0)
    errors = models.JSONField(default=list, blank=True, help_text="The first rejected lines: {line, reason}.")
    failure = models.TextField(blank=True, help_text="Why the file as a whole could not be read to its end.")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.original_name

    @property
    def percent(self) -> int:
        if self.status == self.Status.SUCCEEDED or self.size == 0:
            return 100 if self.status == self.Status.SUCCEEDED else 0
        return min(99, int(100 * self.bytes_read / self.size))

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.SUCCEEDED, self.Status.PARTIAL, self.Status.FAILED)


class Trajectory(UUIDModel):
    """One run of an agent: what it saw, called and said, and how it ended."""

    # No index of its own: `trajectory_agent_recent` leads with the agent (each index costs every ingest).
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="trajectories", db_index=False)
    upload = models.ForeignKey(Upload, null=True, blank=True, on_delete=models.SET_NULL, related_name="trajectories")
    # The dedup key, within the agent: (source, external_id) when the record has an id, else content_hash.
    source = models.CharField(max_length=100)
    external_id = models.CharField(max_length=255, blank=True)
    content_hash = models.CharField(max_length=64)
    model_version = models.CharField(max_length=100, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.UNKNOWN)
    final_result = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.IntegerField(null=True, blank=True)
    input_tokens = models.IntegerField(null=True, blank=True)
    output_tokens = models.IntegerField(null=True, blank=True)
    cost = models.FloatField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    step_count = models.IntegerField(default=0)
    has_error = models.BooleanField(default=False)
    # Step texts joined (capped) for search; PostgreSQL indexes it with pg_trgm, and its words through
    # `search_vector`, a generated tsvector column that is no model field (migration 0009).
    search_text = models.TextField(blank=True)
    ingested_at = models.DateTimeField()

    class Meta:
        ordering = ["-ingested_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "source", "external_id"],
                condition=~models.Q(external_id=""),
                name="trajectory_unique_agent_source_id",
            ),
            models.UniqueConstraint(
                fields=["agent", "content_hash"],
                condition=models.Q(external_id=""),
                name="trajectory_unique_agent_content",
            ),
        ]
        indexes = [
            models.Index(fields=["-ingested_at", "-id"], name="trajectory_recent"),
            models.Index(fields=["agent", "-ingested_at"], name="trajectory_agent_recent"),
            models.Index(fields=["outcome", "-ingested_at"], name="trajectory_outcome_recent"),
            models.Index(fields=["model_version", "-ingested_at"], name="trajectory_version_recent"),
            models.Index(fields=["has_error", "-ingested_at"], name="trajectory_error_recent"),
            # Counts per agent and version (a version's failure rate, the dashboards' recount) read this index
            # alone: 65 ms against 410 for a scan, for an agent of 450,000 trajectories.
            models.Index(fields=["agent", "model_version", "outcome"], name="trajectory_agent_version_count"),
        ]

    def __str__(self) -> str:
        return self.external_id or str(self.id)


class Feedback(TimestampedModel):
    """An end user's judgement of a trajectory, sent by the agent's product: a thumb or a score, and a comment.

    A trajectory may have several (one per user, or a user changing their mind); none is ever overwritten.
    """

    class Thumb(models.TextChoices):
        UP = "up", "Thumbs up"
        DOWN = "down", "Thumbs down"

    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="feedback")
    thumb = models.CharField(max_length=4, choices=Thumb.choices, blank=True)
    score = models.FloatField(null=True, blank=True)
    comment = models.TextField(blank=True)
    # The end user's id in the agent's product, as sent: not a user of this app.
    end_user = models.CharField(max_length=255, blank=True)
    sent_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(thumb="") & models.Q(score__isnull=False))
                | (~models.Q(thumb="") & models.Q(score__isnull=True)),
                name="feedback_thumb_or_score",
            ),
        ]
        indexes = [models.Index(fields=["trajectory", "thumb"], name="feedback_thumb")]

    def __str__(self) -> str:
        return self.thumb or f"{self.score:g}"


class OtlpSpan(models.Model):
    """A span received over OTLP, kept so a trace sent over several exports is assembled whole."""

    trace_id = models.CharField(max_length=32, db_index=True)
    span_id = models.CharField(max_length=16)
    # The id of the model's answer when the span records a call (`gen_ai.response.id`): the chat
    # endpoint's own record of the same call finds the trace by it.
    response_id = models.CharField(max_length=255, blank=True, default="")
    payload = models.JSONField()
    received_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["trace_id", "span_id"], name="otlp_span_unique")]
        indexes = [models.Index(fields=["response_id"], condition=~models.Q(response_id=""), name="otlp_span_response")]

    def __str__(self) -> str:
        return f"{self.trace_id}/{self.span_id}"


class Step(models.Model):
    # No index of its own: `step_unique_index` (trajectory, index) leads with it.
    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="steps", db_index=False)
    index = models.IntegerField()
    kind = models.CharField(max_length=24, choices=StepKind.choices)
    text = models.TextField(blank=True)
    tool_name = models.CharField(max_length=200, blank=True)
    # Parsed arguments of a tool call; `tool_arguments_raw` keeps what was sent when it was not valid JSON.
    tool_arguments = models.JSONField(null=True, blank=True)
    tool_arguments_raw = models.TextField(blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    is_error = models.BooleanField(default=False)
    latency_ms = models.IntegerField(null=True, blank=True)
    input_tokens = models.IntegerField(null=True, blank=True)
    output_tokens = models.IntegerField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["trajectory", "index"]
        constraints = [models.UniqueConstraint(fields=["trajectory", "index"], name="step_unique_index")]
        indexes = [models.Index(fields=["tool_name", "trajectory"], name="step_tool")]

    def __str__(self) -> str:
        return f"{self.index}:{self.kind}"
