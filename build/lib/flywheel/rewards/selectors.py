"""Reads of the rewards app: runs, a run's reward histogram and components, agreement, comparisons.

Agreement is counted over marks (one per output and reviewer): the share of marks that agree
with the score. The outputs list puts disagreements first, then outputs nobody marked yet,
then agreed ones, so a reviewer sees the doubtful scores first. A comparison pairs the rows of
two runs of the same root by the output they share and shows what changed and why.

The LLM judge's report (`judge_report`) sets its judgements of a run's outputs against the
reviewers' labels (a mark that agrees keeps the score's pass/fail, one that disagrees flips it);
`judge_approval` says whether an agent's judge may be a training reward. `bucket_judging_list`
gives an agent's bucket judgings (the judge as a bucket suggester) with what each one suggested.

Runs are read through `run_visible`: those whose snapshot's agent the viewer may see (runs on a
snapshot of no agent: all-agents users only); the per-run reads take a run read that way.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db.models import Avg, Case, Count, IntegerField, Prefetch, Q, QuerySet, Value, When

from flywheel.core.models import Agent
from flywheel.core.selectors import agents_filter
from flywheel.ingest.models import Trajectory
from flywheel.rewards.models import (
    AgentJudge,
    BucketJudging,
    Judgement,
    JudgeRun,
    Mark,
    MarkVerdict,
    ProfiledOutput,
    ProfileRun,
)
from flywheel.training.models import JobState
from flywheel.triage.models import AgentPolicy
from trainer.verifiers.base import UNPARSEABLE_REASON
from trainer.verifiers.judge import JudgeAgreement, judge_agreement
from trainer.verifiers.safety import SafetyPolicy

UNCHANGED = 1e-9


def run_visible(*, viewer: User) -> QuerySet[ProfileRun]:
    return ProfileRun.objects.filter(agents_filter(viewer, "snapshot__agent"))


def run_get(*, run_id: UUID, viewer: User) -> ProfileRun | None:
    return run_visible(viewer=viewer).select_related("snapshot", "parent", "created_by").filter(pk=run_id).first()


def run_list(*, viewer: User) -> QuerySet[ProfileRun]:
    return (
        run_visible(viewer=viewer)
        .select_related("snapshot", "created_by", "parent")
        .annotate(output_count=Count("outputs"), mean_reward=Avg("outputs__reward"))
    )


def run_family(*, run: ProfileRun) -> QuerySet[ProfileRun]:
    """Every run over the same sampled outputs: the root and its re-verifies, oldest first."""
    root = run.family_id
    return ProfileRun.objects.filter(Q(pk=root) | Q(root_id=root)).order_by("created_at")


def default_policy(*, agent_id: UUID | None) -> dict[str, Any]:
    """The agent's own safety policy where it has one, else trainer's default."""
    record = AgentPolicy.objects.filter(agent_id=agent_id).first() if agent_id else None
    return dict(record.policy) if record is not None else SafetyPolicy.default().to_json()


@dataclass(frozen=True)
class RunSummary:
    outputs: int
    mean_reward: float | None
    passed: int
    unparseable: int
    unsafe: int

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.outputs if self.outputs else None


def run_summary(*, run: ProfileRun) -> RunSummary:
    return _summary(list(run.outputs.values_list("reward", "passed", "verdict")))


def _summary(rows: Sequence[tuple[Any, ...]]) -> RunSummary:
    """From (reward, passed, verdict, ...) rows."""
    return RunSummary(
        outputs=len(rows),
        mean_reward=sum(row[0] for row in rows) / len(rows) if rows else None,
        passed=sum(1 for row in rows if row[1]),
        unparseable=sum(1 for row in rows if str(row[2].get("reason", "")).startswith(UNPARSEABLE_REASON)),
        unsafe=sum(1 for row in rows if row[2].get("violations")),
    )


@dataclass(frozen=True)
class ComponentStat:
    name: str
    mean: float
    minimum: float
    maximum: float
    count: int


@dataclass(frozen=True)
class RunProfile:
    summary: RunSummary
    rewards: list[float]  # in sample order
    components: list[ComponentStat]  # each component's mean and range over the outputs that report it


def run_profile(*, run: ProfileRun) -> RunProfile:
    """A run's summary, rewards and reward components, from one read of its outputs."""
    rows = list(run.outputs.order_by("position").values_list("reward", "passed", "verdict", "components"))
    values: dict[str, list[float]] = defaultdict(list)
    for *_scores, components in rows:
        for name, value in components.items():
            values[name].append(float(value))
    stats = [ComponentStat(name, sum(found) / len(found), min(found), max(found), len(found))
             for name, found in values.items()]  # fmt: skip
    return RunProfile(summary=_summary(rows), rewards=[row[0] for row in rows], components=stats)


@dataclass(frozen=True)
class Agreement:
    outputs: int
    marked_outputs: int
    agree: int
    disagree: int

    @property
    def marks(self) -> int:
        return self.agree + self.disagree

    @property
    def rate(self) -> float | None:
        """The share of marks that agree with the score; None before the first mark."""
        return self.agree / self.marks if self.marks else None


def agreement(*, run: ProfileRun) -> Agreement:
    marks = Mark.objects.filter(output__run=run)
    counts = dict(marks.values_list("verdict").annotate(n=Count("id")).order_by())
    return Agreement(
        outputs=run.outputs.count(),
        marked_outputs=marks.values("output").distinct().count(),
        agree=counts.get(MarkVerdict.AGREE, 0),
        disagree=counts.get(MarkVerdict.DISAGREE, 0),
    )


def _with_marks(outputs: QuerySet[ProfiledOutput]) -> QuerySet[ProfiledOutput]:
    return outputs.annotate(
        disagree_count=Count("marks", filter=Q(marks__verdict=MarkVerdict.DISAGREE)),
        agree_count=Count("marks", filter=Q(marks__verdict=MarkVerdict.AGREE)),
    ).prefetch_related(Prefetch("marks", queryset=Mark.objects.select_related("reviewer").order_by("created_at")))


@dataclass(frozen=True)
class OutputRow:
    """An output with its marks counted, and the viewing user's own mark on it (None if none)."""

    output: ProfiledOutput
    mine: Mark | None


def _row(output: ProfiledOutput, user: User) -> OutputRow:
    mine = next((mark for mark in output.marks.all() if mark.reviewer_id == user.pk), None)
    return OutputRow(output, mine)


def output_rows(*, run: ProfileRun, user: User) -> list[OutputRow]:
    """The run's outputs: disagreed first, then unmarked, then agreed; in sample order within each."""
    rank = Case(
        When(disagree_count__gt=0, then=Value(0)),
        When(agree_count__gt=0, then=Value(2)),
        default=Value(1),
        output_field=IntegerField(),
    )
    outputs = _with_marks(run.outputs.select_related("task", "item")).annotate(rank=rank).order_by("rank", "position")
    return [_row(output, user) for output in outputs]


def output_row(*, output_id: int, user: User) -> OutputRow:
    """One output as `output_rows` gives it, after a mark changed."""
    outputs = ProfiledOutput.objects.filter(agents_filter(user, "run__snapshot__agent"))
    return _row(_with_marks(outputs.select_related("task", "item", "run")).get(pk=output_id), user)


# --- comparison ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ComparedOutput:
    base: ProfiledOutput
    other: ProfiledOutput
    base_marks: list[Mark]

    @property
    def delta(self) -> float:
        return self.other.reward - self.base.reward

    @property
    def changed(self) -> bool:
        return abs(self.delta) > UNCHANGED or self.base.passed != self.other.passed

    @property
    def violations_added(self) -> list[str]:
        return sorted(set(self.other.verdict.get("violations", [])) - set(self.base.verdict.get("violations", [])))

    @property
    def violations_removed(self) -> list[str]:
        return sorted(set(self.base.verdict.get("violations", [])) - set(self.other.verdict.get("violations", [])))

    @property
    def component_changes(self) -> list[tuple[str, float, float]]:
        names = list(dict.fromkeys([*self.base.components, *self.other.components]))
        pairs = [(name, self.base.components.get(name, 0.0), self.other.components.get(name, 0.0)) for name in names]
        return [(name, old, new) for name, old, new in pairs if abs(new - old) > UNCHANGED]


@dataclass
class Comparison:
    base: ProfileRun
    other: ProfileRun
    rows: list[ComparedOutput] = field(default_factory=list)

    @property
    def changed(self) -> list[ComparedOutput]:
        return [row for row in self.rows if row.changed]

    @property
    def raised(self) -> int:
        return sum(1 for row in self.rows if row.delta > UNCHANGED)

    @property
    def lowered(self) -> int:
        return sum(1 for row in self.rows if row.delta < -UNCHANGED)

    @property
    def same_outputs(self) -> bool:
        """Both runs hold byte-identical outputs, row for row (the re-verify guarantee)."""
        return all(row.base.output_sha256 == row.other.output_sha256 for row in self.rows)


class NotComparable(ValueError):
    """The two runs do not score the same sampled outputs."""


def run_comparison(*, base: ProfileRun, other: ProfileRun) -> Comparison:
    """Pair the outputs of two runs of one root; changed scores first, biggest change first."""
    if base.family_id != other.family_id:
        raise NotComparable("these runs score different outputs: compare runs re-verified from the same one")
    base_rows = {row.origin_key: row for row in _with_marks(base.outputs.select_related("task"))}
    comparison = Comparison(base=base, other=other)
    for row in other.outputs.select_related("task").order_by("position"):
        match = base_rows.get(row.origin_key)
        if match is not None:
            comparison.rows.append(ComparedOutput(match, row, list(match.marks.all())))
    comparison.rows.sort(key=lambda pair: (not pair.changed, -abs(pair.delta), pair.other.position))
    return comparison


# --- the LLM judge: reviewers' labels, the judge's agreement with them, approval as a reward -------------

MIN_LABELS = 50  # the guide: "run the reward on 50-100 outputs and check the scores by hand"


def judge_settings(*, agent: Agent) -> AgentJudge:
    """The agent's judge as the team set it in the admin; the defaults (unsaved) where nobody has yet."""
    return AgentJudge.objects.filter(agent=agent).first() or AgentJudge(agent=agent)


def reviewer_labels(*, run: ProfileRun) -> dict[int, bool]:
    """Each marked output's pass/fail as its reviewers say, by output id.

    A mark agrees or disagrees with the verifier's pass/fail, so it gives the reviewer's own
    label: the score's when they agree, the other when not. Several reviewers: the majority;
    a tie is no label (the reviewers themselves disagree).
    """
    votes: dict[int, int] = defaultdict(int)
    passed: dict[int, bool] = {}
    for output_id, output_passed, verdict in Mark.objects.filter(output__run=run).values_list(
        "output_id", "output__passed", "verdict"
    ):
        passed[output_id] = output_passed
        votes[output_id] += 1 if verdict == MarkVerdict.AGREE else -1
    return {output_id: passed[output_id] == (vote > 0) for output_id, vote in votes.items() if vote != 0}


@dataclass(frozen=True)
class JudgeDisagreement:
    output: ProfiledOutput
    label: bool
    judgement: Judgement


@dataclass(frozen=True)
class JudgeReport:
    """A run's latest judge run set against the reviewers' labels of the outputs it judged."""

    judge_run: JudgeRun | None
    labelled: int  # outputs of the run with a reviewer label now
    agreement: JudgeAgreement | None  # None until a judge run has succeeded
    disagreements: list[JudgeDisagreement]

    @property
    def enough_labels(self) -> bool:
        return self.agreement is not None and self.agreement.n >= MIN_LABELS


def judge_run_latest(*, run: ProfileRun) -> JudgeRun | None:
    return run.judge_runs.select_related("job").first()


def judge_report(*, run: ProfileRun) -> JudgeReport:
    """The latest judge run's agreement with the labels as they are now, and its disagreements in sample order.

    Outputs labelled after the judge ran are not counted: the judge never saw them.
    """
    labels = reviewer_labels(run=run)
    judge_run = judge_run_latest(run=run)
    if judge_run is None or judge_run.job.state != JobState.SUCCEEDED:
        return JudgeReport(judge_run, len(labels), None, [])
    judgements = [row for row in judge_run.judgements.select_related("output__task") if row.output_id in labels]
    result = judge_agreement([(row.passed, labels[row.output_id]) for row in judgements])
    disagreements = [JudgeDisagreement(row.output, labels[row.output_id], row)
                     for row in judgements if row.passed != labels[row.output_id]]  # fmt: skip
    return JudgeReport(judge_run, len(labels), result, disagreements)


@dataclass(frozen=True)
class JudgeApproval:
    """Whether the agent's judge may be a training reward, and why (a sentence naming the figures)."""

    approved: bool
    reason: str
    threshold: float
    agreement: JudgeAgreement | None = None


def judge_approval(*, agent: Agent) -> JudgeApproval:
    """Approved when the agent's judge, this very model and rubric, agreed with reviewers on >= MIN_LABELS
    labelled outputs at a rate of at least the agent's threshold, in its latest measurement."""
    judge = judge_settings(agent=agent)
    threshold = judge.agreement_threshold
    measured = (
        JudgeRun.objects.filter(run__snapshot__agent=agent, job__state=JobState.SUCCEEDED, base_model=judge.base_model,
                                adapter=judge.adapter, rubric=judge.rubric)
        .select_related("run").order_by("-created_at").first()
    )  # fmt: skip
    if measured is None:
        return JudgeApproval(False, f"the judge of {agent.name} has not been measured against reviewers' marks "
                                    "with its current model and rubric", threshold)  # fmt: skip
    report = judge_report(run=measured.run)
    result = report.agreement if report.judge_run == measured else None
    if result is None or result.rate is None or result.n < MIN_LABELS:
        n = result.n if result else 0
        return JudgeApproval(False, f"not enough labels: the judge was measured on {n} labelled outputs, "
                                    f"{MIN_LABELS} are needed", threshold, result)  # fmt: skip
    figures = f"agreement {result.rate.value:.1%} on {result.n} labelled outputs, threshold {threshold:.0%}"
    if result.rate.value < threshold:
        return JudgeApproval(False, f"the judge agrees too little with reviewers: {figures}", threshold, result)
    return JudgeApproval(True, f"approved: {figures}", threshold, result)


# --- the judge as a bucket suggester: an agent's bucket judgings and what each suggested ------------------

JUDGINGS_SHOWN = 60  # twenty launches of three buckets; older ones stay on the jobs page


@dataclass(frozen=True)
class MadeSuggestion:
    """One suggestion a judging stored: the trajectory (its external id where it still exists), score, reason."""

    trajectory_id: str
    label: str | None  # None: the trajectory is gone
    score: float
    reason: str


@dataclass(frozen=True)
class BucketJudgingRow:
    judging: BucketJudging
    judged: int | None  # items the job returned a verdict for; None until it succeeded
    unreadable: int | None  # replies with no readable score, of those
    suggestions: list[MadeSuggestion]

    @property
    def asked(self) -> int:
        return len(self.judging.trajectory_ids)


def _judging_row(judging: BucketJudging, labels: dict[str, str]) -> BucketJudgingRow:
    metrics = judging.job.result.get("metrics", {}) if judging.job.state == JobState.SUCCEEDED else {}
    made = [MadeSuggestion(row["trajectory"], labels.get(row["trajectory"]), row["score"], row["reason"])
            for row in judging.suggestions]  # fmt: skip
    return BucketJudgingRow(judging, metrics.get("items"), metrics.get("unreadable"), made)


def bucket_judging_list(*, viewer: User, agent: Agent, limit: int = JUDGINGS_SHOWN) -> list[BucketJudgingRow]:
    """The agent's newest bucket judgings, at most `limit`, newest first; none of an agent `viewer` may not see.

    Two queries whatever the count: the judgings with their job, bucket and launcher, and the
    external ids of the trajectories they suggested buckets for.
    """
    judgings = list(
        BucketJudging.objects.filter(agents_filter(viewer), agent=agent)
        .select_related("job", "bucket", "created_by")
        .defer("job__cases", "job__log_tail", "job__hyperparameters")
        .order_by("-created_at", "-pk")[:limit]
    )
    ids = {row["trajectory"] for judging in judgings for row in judging.suggestions}
    found = Trajectory.objects.filter(agent=agent, pk__in=ids).values_list("pk", "external_id") if ids else []
    labels = {str(pk): external_id or str(pk) for pk, external_id in found}
    return [_judging_row(judging, labels) for judging in judgings]
