"""Jobs that run trainer (eval, sft, dpo, grpo, gate, mine, replay, synth, judge), what they report as they run,
and eval results.

Every kind but `replay` and `judge` runs on a task snapshot. A replay answers a failing step's
conversation again (the registry's `Replay` launches it): its one case is carried by the job
itself (`cases`), since a trajectory cut at its failing step is not a regression task and must
not become one. A judge job (the rewards app's `JudgeRun` launches it) carries the items its
judge model scores (`trainer.spec.judge`) the same way.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from flywheel.core.models import Agent, TimestampedModel, UUIDModel
from flywheel.datasets.models import TaskSetSnapshot
from trainer.spec import kinds as trainer_kinds


class JobKind(models.TextChoices):
    EVAL = "eval", "Evaluation"
    SFT = "sft", "SFT"
    DPO = "dpo", "DPO"
    GRPO = "grpo", "GRPO"
    GATE = "gate", "Gate"
    MINE = "mine", "Hard-task mining"
    REPLAY = "replay", "Replay"
    SYNTH = "synth", "Synthetic variants"
    JUDGE = "judge", "Judge"


# The kinds that train an adapter (the trainer's list): they need a train snapshot, resume from an
# earlier attempt's checkpoint, and the registry registers what they produce.
TRAINING_KINDS = tuple(JobKind(kind) for kind in trainer_kinds.TRAINING_KINDS)
# The kinds that run on the cases the job carries instead of a snapshot.
CASE_KINDS = (JobKind.REPLAY, JobKind.JUDGE)


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued, waiting for a worker"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


FINISHED_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class Job(UUIDModel, TimestampedModel):
    kind = models.CharField(max_length=8, choices=JobKind.choices)
    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.QUEUED, db_index=True)
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs")
    snapshot = models.ForeignKey(
        TaskSetSnapshot, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs",
        help_text="The tasks trained on (sft, grpo), the preference pairs (dpo) or the tasks evaluated (eval, gate); "
                  "none for a replay.",
    )  # fmt: skip
    cases = models.JSONField(
        default=list, blank=True,
        help_text="What a replay answers or a judge scores, instead of a snapshot: replay cases "
                  "(trainer.spec.replay) or judge items (trainer.spec.judge) as JSON.",
    )  # fmt: skip
    heldout_snapshot = models.ForeignKey(
        TaskSetSnapshot, null=True, blank=True, on_delete=models.PROTECT, related_name="heldout_jobs",
        help_text="Held-out tasks a training run evaluates every eval_interval steps.",
    )  # fmt: skip
    regression_snapshot = models.ForeignKey(
        TaskSetSnapshot, null=True, blank=True, on_delete=models.PROTECT, related_name="regression_jobs",
        help_text="Regression tasks a gate must not break.",
    )  # fmt: skip
    mined_snapshot = models.ForeignKey(
        TaskSetSnapshot, null=True, blank=True, on_delete=models.PROTECT, related_name="mined_by_jobs",
        help_text="A mine job's result: the train tasks it kept, frozen as a snapshot for GRPO.",
    )  # fmt: skip
    base_model = models.CharField(max_length=500)
    adapter = models.CharField(max_length=500, blank=True)
    hyperparameters = models.JSONField(default=dict, blank=True)
    launched_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    attempts = models.PositiveSmallIntegerField(default=0)
    max_attempts = models.PositiveSmallIntegerField(default=3)
    cancel_requested = models.BooleanField(default=False)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    dispatched_at = models.DateTimeField(
        null=True, blank=True, help_text="When its run message was last handed to the broker."
    )
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    run_dir = models.CharField(max_length=500, blank=True, help_text="The current attempt's folder.")
    exit_code = models.IntegerField(null=True, blank=True)
    log_tail = models.TextField(blank=True)
    error = models.TextField(blank=True)
    result = models.JSONField(default=dict, blank=True, help_text="The done event: metrics and files.")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["state", "heartbeat_at"], name="job_state_heartbeat")]
        constraints = [
            # A replay or a judge job carries its cases; every other kind runs on a snapshot.
            models.CheckConstraint(
                condition=models.Q(kind__in=[kind.value for kind in CASE_KINDS], snapshot__isnull=True)
                | (~models.Q(kind__in=[kind.value for kind in CASE_KINDS]) & models.Q(snapshot__isnull=False)),
                name="job_snapshot_or_cases",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {str(self.id)[:8]}"

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def task_snapshot(self) -> TaskSetSnapshot:
        """The snapshot of a kind that runs on one (all but a replay); a ValueError for a job without."""
        if self.snapshot is None:
            raise ValueError(f"{self.kind} job {self.pk} runs on no snapshot")
        return self.snapshot


class MetricPoint(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="metric_points")
    attempt = models.PositiveSmallIntegerField()
    step = models.IntegerField()
    name = models.CharField(max_length=100)
    value = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job", "name", "step"]
        indexes = [
            models.Index(fields=["job", "name", "step"], name="metric_job_name_step"),
            # The job page's progress reads an attempt's first and last step on every poll.
            models.Index(fields=["job", "attempt", "step"], name="metric_job_attempt_step"),
        ]

    def __str__(self) -> str:
        return f"{self.name}@{self.step}={self.value}"


class Sample(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="samples")
    step = models.IntegerField()
    task_id = models.CharField(max_length=255)
    prompt = models.TextField()
    completion = models.TextField()
    reward = models.FloatField()
    components = models.JSONField(default=dict)
    # A multi-turn episode's turns as chat messages (trainer.contracts.SampleEvent); null for one answer.
    episode = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["job", "step", "id"]

    def __str__(self) -> str:
        return f"{self.task_id}@{self.step}"


class EvalRun(TimestampedModel):
    """An evaluation's results, stored from an eval (or gate) job's done event."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="eval_run")
    snapshot = models.ForeignKey(TaskSetSnapshot, on_delete=models.PROTECT, related_name="eval_runs")
    model_label = models.CharField(max_length=500, help_text="The base model, plus the adapter when one was used.")
    metrics = models.JSONField(help_text="Each rate with its bootstrap 95% interval.")
    per_bucket = models.JSONField(default=dict, blank=True)
    results = models.JSONField(default=list, blank=True, help_text="Per-task output, parsed call, verdict, latency.")
    recommendation = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"eval of {self.model_label} on {self.snapshot}"
