"""Regression tasks and preference pairs in train and held-out splits, task revisions, immutable snapshots, and
batches of synthetic task variants awaiting a reviewer."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from flywheel.core.models import Agent, TimestampedModel, UUIDModel


class Split(models.TextChoices):
    TRAIN = "train", "Train"
    HELDOUT = "heldout", "Held-out"


class Environment(models.TextChoices):
    SINGLE_STEP = "single_step", "Single-step tool call"
    WORKBENCH = "workbench", "WorkBench sandbox"
    REPLAY = "replay", "Replay of a recorded trajectory"
    TEAM = "team", "The team's own environment"


class SourceKind(models.TextChoices):
    TRAJECTORY = "trajectory", "A production trajectory"
    FILE = "file", "An imported file"
    TEMPLATE = "template", "A template"
    MANUAL = "manual", "Written by hand"
    SYNTHETIC = "synthetic", "A synthetic variant of a train task"


class RegressionTask(UUIDModel, TimestampedModel):
    """What the model sees, the tools offered and the calls a correct answer makes.

    `content` is the task in trainer's native JSON (`trainer.contracts.Task`): messages, tools,
    expected calls with accepted alternatives, no-call and order flags. The columns beside it are
    what pages filter on and what the leakage rule reads.
    """

    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.PROTECT, related_name="tasks")
    external_id = models.CharField(max_length=255, help_text="The id the source gave, e.g. simple_python_0.")
    split = models.CharField(max_length=8, choices=Split.choices, db_index=True)
    environment = models.CharField(max_length=16, choices=Environment.choices, default=Environment.SINGLE_STEP)
    source_kind = models.CharField(max_length=16, choices=SourceKind.choices)
    source_ref = models.CharField(max_length=500, blank=True, help_text="File and line, or template name.")
    source_trajectory = models.ForeignKey(
        "ingest.Trajectory", null=True, blank=True, on_delete=models.SET_NULL, related_name="tasks"
    )
    bucket = models.ForeignKey("triage.Bucket", null=True, blank=True, on_delete=models.SET_NULL, related_name="tasks")
    category = models.CharField(max_length=100, blank=True, help_text="BFCL category or WorkBench domain.")
    content = models.JSONField()
    content_hash = models.CharField(max_length=64, db_index=True)
    # Normalised prompt, or the source's template: no key may sit in both splits.
    leakage_key = models.CharField(max_length=64, db_index=True)
    leakage_text = models.TextField()
    duplicate_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="Flagged: another task of the same split has the same leakage key.",
    )  # fmt: skip
    warnings = models.JSONField(default=list, blank=True, help_text="Values that do not fit their schema (imports).")
    revision = models.PositiveIntegerField(default=1)

    class Meta:
        ordering = ["split", "external_id"]
        indexes = [
            models.Index(fields=["split", "leakage_key"], name="task_split_leakage"),
            models.Index(fields=["agent", "split"], name="task_agent_split"),
        ]

    def __str__(self) -> str:
        return self.external_id

    @property
    def tool_names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.content.get("tools", [])]

    @property
    def expected_names(self) -> list[str]:
        return [call["name"] for call in self.content.get("expected_calls", [])]


class TaskRevision(models.Model):
    """An earlier version of a task's content, kept on every edit."""

    task = models.ForeignKey(RegressionTask, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    content = models.JSONField()
    split = models.CharField(max_length=8, choices=Split.choices)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    note = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["task", "-number"]
        constraints = [models.UniqueConstraint(fields=["task", "number"], name="task_revision_unique")]

    def __str__(self) -> str:
        return f"{self.task_id} r{self.number}"


class SnapshotKind(models.TextChoices):
    TASKS = "tasks", "Regression tasks"
    PAIRS = "pairs", "Preference pairs"


class TaskSetSnapshot(UUIDModel):
    """An immutable, content-hashed list of tasks (or of preference pairs) as they were, which a job runs on.

    A snapshot of kind `pairs` holds `PairSnapshotItem`s instead of `SnapshotItem`s; `task_count`
    counts its items either way.
    """

    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=8, choices=SnapshotKind.choices, default=SnapshotKind.TASKS)
    split = models.CharField(max_length=8, choices=Split.choices)
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.PROTECT, related_name="snapshots")
    content_hash = models.CharField(max_length=64, unique=True)
    task_count = models.PositiveIntegerField()
    # How the tasks were chosen: the filter, and for a sample its size, stratum field and seed.
    selection = models.JSONField(default=dict)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    # Set when a job first used it; from then on its held-out tasks can never move to train.
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.content_hash[:12]})"


class SnapshotItem(models.Model):
    snapshot = models.ForeignKey(TaskSetSnapshot, on_delete=models.CASCADE, related_name="items")
    task = models.ForeignKey(RegressionTask, on_delete=models.PROTECT, related_name="snapshot_items")
    position = models.PositiveIntegerField()
    content = models.JSONField(help_text="The task's content when the snapshot was taken.")
    content_hash = models.CharField(max_length=64)
    bucket = models.CharField(max_length=50, blank=True)
    category = models.CharField(max_length=100, blank=True)

    class Meta:
        ordering = ["snapshot", "position"]
        constraints = [models.UniqueConstraint(fields=["snapshot", "position"], name="snapshot_item_position")]

    def __str__(self) -> str:
        return f"{self.snapshot_id}:{self.position}"


class PairSource(models.TextChoices):
    CORRECTION = "correction", "A reviewer's correction"
    HUMAN_INTERVENTION = "human_intervention", "A human intervention in the trajectory"


class PreferencePair(UUIDModel):
    """A preferred answer and a rejected one to the same conversation: what DPO trains on.

    `prompt` is the conversation before the answer as OpenAI chat messages and `tools` the tools
    offered; `chosen` and `rejected` are assistant messages (tool calls with their arguments as
    objects, as TRL's chat templates take them). The split follows the leakage rule of tasks: a
    prompt's key sits in one split only, across tasks and pairs.
    """

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="preference_pairs")
    prompt = models.JSONField()
    tools = models.JSONField(default=list, blank=True)
    chosen = models.JSONField()
    rejected = models.JSONField()
    source = models.CharField(max_length=24, choices=PairSource.choices)
    correction = models.OneToOneField(
        "triage.Correction", null=True, blank=True, on_delete=models.SET_NULL, related_name="pair"
    )
    trajectory = models.ForeignKey(
        "ingest.Trajectory", null=True, blank=True, on_delete=models.SET_NULL, related_name="preference_pairs"
    )
    step_index = models.IntegerField(help_text="The step of the trajectory whose answer was rejected.")
    split = models.CharField(max_length=8, choices=Split.choices, db_index=True)
    content_hash = models.CharField(max_length=64, db_index=True)
    leakage_key = models.CharField(max_length=64, db_index=True)
    leakage_text = models.TextField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "id"]
        constraints = [
            # A trajectory's intervention yields one pair, however often it is converted.
            models.UniqueConstraint(fields=["trajectory", "step_index"], name="pair_unique_intervention",
                                    condition=models.Q(source="human_intervention")),
        ]  # fmt: skip
        indexes = [models.Index(fields=["agent", "split"], name="pair_agent_split")]

    def __str__(self) -> str:
        return f"pair {self.pk} ({self.get_source_display()})"


class PairSnapshotItem(models.Model):
    """A pair of a `pairs` snapshot, frozen as its JSONL line (`flywheel.datasets.pairs.pair_line`)."""

    snapshot = models.ForeignKey(TaskSetSnapshot, on_delete=models.CASCADE, related_name="pair_items")
    pair = models.ForeignKey(PreferencePair, on_delete=models.PROTECT, related_name="snapshot_items")
    position = models.PositiveIntegerField()
    content = models.JSONField(help_text="The pair's line when the snapshot was taken.")
    content_hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["snapshot", "position"]
        constraints = [models.UniqueConstraint(fields=["snapshot", "position"], name="pair_snapshot_item_position")]

    def __str__(self) -> str:
        return f"{self.snapshot_id}:{self.position}"


class BatchState(models.TextChoices):
    QUEUED = "queued", "Queued"
    READY = "ready", "Ready for review"
    ACCEPTED = "accepted", "Accepted"
    FAILED = "failed", "Failed"


class SyntheticBatch(UUIDModel, TimestampedModel):
    """Variants generated from an agent's train tasks and screened by the filters of `trainer.spec.synthetic`.

    `report` is the per-batch count: generated, rejected by each filter, accepted, the environment
    filter's applied-or-why-not (and, once a reviewer accepts the batch, how many became train tasks
    and how many the leakage rule refused).
    """

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="synthetic_batches")
    methods = models.JSONField(help_text="The generation methods (trainer.spec.synthetic.METHODS).")
    per_method = models.PositiveIntegerField(default=2)
    seed = models.PositiveIntegerField(default=0)
    verifier = models.CharField(max_length=50, default="tool_call")
    environment = models.CharField(
        max_length=500, blank=True,
        help_text="The agent's environment, in which the environment filter played each variant's expected calls "
                  "(empty: none; the report says whether the filter applied, and why not).",
    )  # fmt: skip
    threshold = models.FloatField(help_text="Similarity at which two variants are near-duplicates.")
    heldout_threshold = models.FloatField(help_text="Similarity at which a variant is close to a held-out task.")
    state = models.CharField(max_length=16, choices=BatchState.choices, default=BatchState.QUEUED, db_index=True)
    seed_count = models.PositiveIntegerField(default=0)
    report = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    accepted_at = models.DateTimeField(null=True, blank=True)
    # The outbox mark: when the generate task's message was handed to the broker (None: not yet).
    dispatched_at = models.DateTimeField(null=True, blank=True)
    # A model's paraphrases arrive from a `synth` job (training app, which this app does not import).
    job_id = models.UUIDField(null=True, blank=True, unique=True, help_text="The synth job whose variants these are.")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"synthetic batch {str(self.pk)[:8]}"

    @property
    def environment_filter(self) -> str:
        """The environment filter in words: that it played the variants, or why not ("" before a report)."""
        reported = (self.report or {}).get("environment")
        if not isinstance(reported, dict):
            return str(reported or "")  # a batch from before the filter says why in words, or nothing
        if reported.get("applied"):
            return f"applied: each variant's expected calls were played in {reported.get('name')}"
        return f"not applied: {reported.get('skipped')}"


class SyntheticCandidate(models.Model):
    """One generated variant: its task, the seed it came from, what changed, and the filter that rejected it."""

    batch = models.ForeignKey(SyntheticBatch, on_delete=models.CASCADE, related_name="candidates")
    position = models.PositiveIntegerField()
    seed_task = models.ForeignKey(RegressionTask, null=True, on_delete=models.SET_NULL, related_name="+")
    method = models.CharField(max_length=16)
    change = models.TextField(help_text="What the variant changed of its seed, in words.")
    content = models.JSONField(help_text="The variant as trainer.contracts.Task JSON.")
    rejected_by = models.CharField(max_length=32, blank=True, db_index=True, help_text="Empty: accepted.")
    reason = models.TextField(blank=True)
    task = models.OneToOneField(
        RegressionTask, null=True, blank=True, on_delete=models.SET_NULL, related_name="synthetic_candidate"
    )

    class Meta:
        ordering = ["batch", "position"]
        constraints = [models.UniqueConstraint(fields=["batch", "position"], name="synthetic_candidate_position")]

    def __str__(self) -> str:
        return f"{self.batch_id}:{self.position}"

    @property
    def request(self) -> str:
        users = [m.get("content") for m in self.content.get("messages", []) if m.get("role") == "user"]
        return str(users[-1]) if users else ""
