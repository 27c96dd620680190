"""Reward profiling: a run scores sampled outputs of a snapshot's tasks; people mark each score.

A ProfileRun is one scoring of a set of outputs: a snapshot, a verifier, a safety policy and
optionally an environment. A root run samples its outputs (from an uploaded outputs file or
from ingested trajectories); a re-verify run has a `parent` and copies the parent's outputs
verbatim (same text, same hash, `origin` pointing at the first row), so two runs of one root
always score exactly the same outputs. Marks say whether a person agrees with a score.

The LLM judge (`AgentJudge`, one per agent) is measured here before it may be trusted: a
`JudgeRun` has the judge score a run's marked outputs (a `judge` job) and keeps a `Judgement`
per output, which the selectors compare with the reviewers' labels.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from flywheel.core.models import Agent, UUIDModel
from flywheel.datasets.models import RegressionTask, SnapshotItem, TaskSetSnapshot
from trainer.contracts import ContractError
from trainer.verifiers.judge import DEFAULT_RUBRIC, Rubric


class OutputSource(models.TextChoices):
    UPLOAD = "upload", "An uploaded outputs file"
    TRAJECTORIES = "trajectories", "Assistant steps of ingested trajectories"
    EVALUATION = "evaluation", "A model's answers from a finished evaluation job"


class ProfileRun(UUIDModel):
    """One scoring of sampled outputs; its settings are frozen when it is created."""

    snapshot = models.ForeignKey(TaskSetSnapshot, on_delete=models.PROTECT, related_name="profile_runs")
    verifier = models.CharField(max_length=50, help_text="A trainer.verifiers name (tool_call, binary, bfcl, shaped).")
    policy = models.JSONField(help_text="The trainer SafetyPolicy JSON the run scored under.")
    environment = models.CharField(
        max_length=32, blank=True, help_text="A trainer.environments name; blank scores with the verifier alone."
    )
    source_kind = models.CharField(max_length=16, choices=OutputSource.choices)
    source_name = models.CharField(max_length=255, blank=True, help_text="The uploaded file's name.")
    # What reading the source found: lines read, outputs matching a task, unknown ids, first errors.
    source_stats = models.JSONField(default=dict, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="reverifies",
        help_text="The run whose outputs this one re-scores.",
    )  # fmt: skip
    root = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="descendants",
        help_text="The run that sampled the outputs; null on that run itself.",
    )  # fmt: skip
    sample_size = models.PositiveIntegerField(help_text="How many outputs were asked for.")
    seed = models.IntegerField(default=0)
    note = models.CharField(max_length=500, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        scorer = f"{self.verifier}" + (f" in {self.environment}" if self.environment else "")
        return f"{scorer} · {self.policy.get('name', 'custom')} · {str(self.id)[:8]}"

    @property
    def family_id(self) -> object:
        """The id of the run that sampled the outputs (this run's own unless it is a re-verify)."""
        return self.root_id or self.pk


class ProfiledOutput(models.Model):
    """One output and its score in one run. The output is never regenerated, only copied."""

    run = models.ForeignKey(ProfileRun, on_delete=models.CASCADE, related_name="outputs")
    position = models.PositiveIntegerField()
    # The first row holding this output (in the root run); null on that row itself.
    origin = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="copies")
    item = models.ForeignKey(SnapshotItem, on_delete=models.PROTECT, related_name="+")
    task = models.ForeignKey(RegressionTask, on_delete=models.PROTECT, related_name="+")
    task_ref = models.CharField(max_length=255, help_text="The task's id as the outputs named it.")
    source_ref = models.CharField(max_length=255, blank=True, help_text="File line, or trajectory and step.")
    output = models.JSONField(help_text="What the model produced: text, or a message / list of calls.")
    output_sha256 = models.CharField(max_length=64)
    reward = models.FloatField()
    passed = models.BooleanField()
    components = models.JSONField(default=dict)
    verdict = models.JSONField(help_text="The verifier's verdict line (or the environment's judgement).")

    class Meta:
        ordering = ["run", "position"]
        constraints = [models.UniqueConstraint(fields=["run", "position"], name="profiled_output_position")]
        indexes = [models.Index(fields=["run", "reward"], name="profiled_output_reward")]

    def __str__(self) -> str:
        return f"{self.task_ref} #{self.position}"

    @property
    def output_text(self) -> str:
        """The output as a person reads it: text as it came, structured output as indented JSON."""
        if isinstance(self.output, str):
            return self.output
        return json.dumps(self.output, indent=2, ensure_ascii=False)

    @property
    def expected_text(self) -> str:
        """The task's expected calls (or that no call is expected), to judge the score against."""
        content = self.item.content
        if content.get("no_call_expected"):
            return "no call expected"
        return "\n".join(json.dumps(call, ensure_ascii=False) for call in content.get("expected_calls", []))

    @property
    def origin_key(self) -> int:
        """The id shared by this output's row in every run of the same root."""
        return self.origin_id or self.pk


class MarkVerdict(models.TextChoices):
    AGREE = "agree", "Agree"
    DISAGREE = "disagree", "Disagree"


class Mark(models.Model):
    """A person's judgement of one score: agree or disagree, and why.

    One mark per output and reviewer: a second reviewer adds their own mark rather than
    overwriting the first, and two people disagreeing about a score is itself worth seeing;
    a reviewer changing their mind updates theirs.
    """

    output = models.ForeignKey(ProfiledOutput, on_delete=models.CASCADE, related_name="marks")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    verdict = models.CharField(max_length=8, choices=MarkVerdict.choices)
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["output", "created_at"]
        constraints = [models.UniqueConstraint(fields=["output", "reviewer"], name="mark_one_per_reviewer")]

    def __str__(self) -> str:
        return f"{self.output_id}: {self.verdict}"


# --- the LLM judge: its settings per agent, its runs over marked outputs, its judgements ---------------


def default_rubric() -> dict[str, object]:
    return DEFAULT_RUBRIC.to_json()


class AgentJudge(models.Model):
    """An agent's LLM judge: the model that judges, the rubric it judges by, and the agreement the team asks of it.

    Edited in the Django admin. The judge may serve as a training reward only once its agreement
    with reviewers' labels reaches `agreement_threshold` on at least `MIN_LABELS` labelled outputs,
    measured with this very model and rubric (`selectors.judge_approval`).
    """

    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, related_name="judge")
    base_model = models.CharField(max_length=500, default="demo", help_text="A local folder, a .gguf file or 'demo'.")
    adapter = models.CharField(max_length=500, blank=True, help_text="An optional LoRA adapter folder for the judge.")
    rubric = models.JSONField(
        default=default_rubric,
        help_text="criteria, pass_means, scale_max (integer), pass_score (0-1]: trainer.verifiers.judge.Rubric.",
    )
    agreement_threshold = models.FloatField(
        default=0.8, help_text="The share of labelled outputs the judge must agree with to be used as a reward."
    )

    def __str__(self) -> str:
        return f"judge of {self.agent}"

    def clean(self) -> None:
        try:
            Rubric.from_json(self.rubric if isinstance(self.rubric, dict) else {})
        except ContractError as error:
            raise ValidationError({"rubric": str(error)}) from None
        if not 0.0 < self.agreement_threshold <= 1.0:
            raise ValidationError({"agreement_threshold": "the threshold is a share in (0, 1]"})


class JudgeRun(models.Model):
    """One judging of a profile run's labelled outputs by the agent's judge, through a `judge` job.

    The model, adapter and rubric are copied from the agent's judge when it is launched, so a later
    change to the judge never passes for a measurement of it.
    """

    run = models.ForeignKey(ProfileRun, on_delete=models.CASCADE, related_name="judge_runs")
    job = models.OneToOneField("training.Job", on_delete=models.PROTECT, related_name="judge_run")
    base_model = models.CharField(max_length=500)
    adapter = models.CharField(max_length=500, blank=True)
    rubric = models.JSONField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"judge {self.base_model} on {self.run} · {str(self.pk)[:8]}"


class Judgement(models.Model):
    """The judge's verdict on one output: score in [0, 1] (null: unreadable reply), passed, reason, raw reply."""

    judge_run = models.ForeignKey(JudgeRun, on_delete=models.CASCADE, related_name="judgements")
    output = models.ForeignKey(ProfiledOutput, on_delete=models.CASCADE, related_name="judgements")
    score = models.FloatField(null=True, blank=True)
    passed = models.BooleanField(null=True, blank=True)
    reason = models.TextField()
    raw = models.TextField(blank=True)

    class Meta:
        ordering = ["judge_run", "output__position"]
        constraints = [models.UniqueConstraint(fields=["judge_run", "output"], name="judgement_one_per_output")]

    def __str__(self) -> str:
        return f"{self.output_id}: {self.score}"


class BucketJudging(models.Model):
    """The agent's judge asked whether failed trajectories belong in one failure bucket, through a `judge` job.

    One per bucket the rules cannot see (wrong tool, bad planning, retrieval failure), each with that
    bucket's rubric (`flywheel.rewards.buckets`). The job's items are named `<trajectory id>:<bucket
    slug>`; when it succeeds its verdicts become `llm_judge` suggestions, once (`stored_at`), and the
    judging keeps a copy of what it suggested (`suggestions`).
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="bucket_judgings")
    job = models.OneToOneField("training.Job", on_delete=models.PROTECT, related_name="bucket_judging")
    bucket = models.ForeignKey("triage.Bucket", on_delete=models.PROTECT, related_name="+")
    trajectory_ids = models.JSONField(help_text="The trajectories asked about, as id strings.")
    base_model = models.CharField(max_length=500)
    adapter = models.CharField(max_length=500, blank=True)
    rubric = models.JSONField()
    suggested = models.PositiveIntegerField(default=0, help_text="Suggestions stored from the job's verdicts.")
    # What it suggested, as stored: [{"trajectory", "score", "reason"}]. Kept here because a later judging
    # of the same bucket replaces these Suggestion rows, and a reviewer's review ends them.
    suggestions = models.JSONField(default=list, blank=True)
    stored_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"judge {self.base_model} on {self.bucket_id} for {self.agent}"
