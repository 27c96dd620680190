"""Reads of the training app: job lists, a job's metric series, progress and flags, samples, evaluations, mining.

Metric series read the job's current attempt only: a retried attempt resumes from a checkpoint
and re-emits the steps after it, so mixing attempts would draw two values per step.

Jobs are read through `job_visible` (the agents the viewer may see; jobs of no agent for
all-agents users); the per-job reads take a job read that way.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db.models import BooleanField, ExpressionWrapper, F, Q, QuerySet
from django.db.models.fields.json import KeyTransform
from django.utils import timezone

from flywheel.core.models import Agent
from flywheel.core.selectors import agents_filter, visible_agents
from flywheel.datasets.models import PreferencePair, SnapshotKind, Split, TaskSetSnapshot
from flywheel.ingest.models import Step
from flywheel.ingest.trace import trace_steps
from flywheel.training.models import EvalRun, Job, JobKind, JobState, MetricPoint, Sample
from flywheel.training.signals import judge_agreement_requested
from flywheel.triage.models import BucketAssignment
from trainer.spec.kinds import config_class
from trainer.spec.recommend import AgentSignals, Recommendation, RecommendationRules, recommend
from trainer.spec.tasks import SKIPPED_TASKS, SkippedLine

Series = dict[str, list[tuple[int, float]]]

FLAG_PREFIX = "flag:"
# The eval job logs "generated <done>/<total>" as it goes (trainer.evaluate's progress hook).
_GENERATED = re.compile(r"^generated (\d+)/(\d+)$")
# The rates trainer.evaluate reports, in the guide's order, with the label the pages show.
EVAL_RATES: tuple[tuple[str, str], ...] = (
    ("valid_json_rate", "Valid JSON"),  # every call written as well-formed JSON (trainer.evaluate)
    ("parseable_rate", "Parseable call"),  # a call read in any syntax, JSON or Python
    ("correct_tool_rate", "Correct tool"),
    ("correct_arguments_rate", "Correct arguments"),
    ("execution_success_rate", "Execution success"),
    ("unsafe_action_rate", "Unsafe action"),
    ("verifier_pass_rate", "Verifier pass"),
    ("mean_reward", "Mean reward"),
)
EVAL_SCALARS: tuple[tuple[str, str], ...] = (
    ("tasks", "Tasks"),
    ("latency_p50_s", "Latency p50 (s)"),
    ("latency_p95_s", "Latency p95 (s)"),
    ("prompt_tokens_per_task", "Prompt tokens per task"),
    ("completion_tokens_per_task", "Completion tokens per task"),
    ("cost_per_task", "Cost per task"),
    ("turns_per_episode", "Turns per episode"),  # episodes only (max_turns above 1)
    ("calls_per_episode", "Calls per episode"),
)
EVAL_EPISODE_RATES: tuple[tuple[str, str], ...] = (("truncation_rate", "Episodes cut by a budget"),)
# Why an episode ended (trainer.episodes), as the per-task rows say it.
EPISODE_ENDS = {
    "answered": "answered without a call", "done": "the environment was done",
    "unreadable": "an answer could not be read", "error": "the environment failed",
    "turn_budget": "turn budget spent", "token_budget": "token budget spent",
}  # fmt: skip
RESULTS_SHOWN = 500


# --- Lists ------------------------------------------------------------------------------------


def job_visible(*, viewer: User) -> QuerySet[Job]:
    return Job.objects.filter(agents_filter(viewer))


def job_get(*, job_id: UUID, viewer: User) -> Job | None:
    related = ("snapshot", "heldout_snapshot", "launched_by", "agent", "mined_snapshot")
    return job_visible(viewer=viewer).select_related(*related).filter(pk=job_id).first()


def job_list(*, viewer: User, kind: str = "", state: str = "", agent: str = "", launched_by: str = "") -> QuerySet[Job]:
    jobs = job_visible(viewer=viewer).select_related("snapshot", "agent", "launched_by")
    for field, value in (
        ("kind", kind),
        ("state", state),
        ("agent__name", agent),
        ("launched_by__username", launched_by),
    ):
        if value:
            jobs = jobs.filter(**{field: value})
    return jobs


@dataclass(frozen=True)
class JobFilterOptions:
    agents: list[str]
    launchers: list[str]


def job_filter_options(*, viewer: User) -> JobFilterOptions:
    """The agents and the people that have jobs `viewer` may see, for the list's filter menus."""
    with_jobs = visible_agents(viewer).filter(jobs__isnull=False).order_by("name")
    agents = with_jobs.values_list("name", flat=True).distinct()
    users = get_user_model().objects.filter(pk__in=job_visible(viewer=viewer).values("launched_by"))
    return JobFilterOptions(agents=list(agents), launchers=list(users.values_list("username", flat=True)))


def latest_train_snapshot(*, agent: Agent | None, kind: str = SnapshotKind.TASKS) -> TaskSetSnapshot | None:
    """The newest train snapshot of `agent` (or of no agent) of a kind (tasks; pairs for dpo): what a
    recommended training run starts from."""
    snapshots = TaskSetSnapshot.objects.filter(split=Split.TRAIN, agent=agent, kind=kind)
    return snapshots.order_by("-created_at").first()


# --- Metrics ----------------------------------------------------------------------------------


def metric_series(*, job: Job) -> Series:
    """Every metric's (step, value) points of the current attempt, in step order."""
    series: Series = defaultdict(list)
    points = MetricPoint.objects.filter(job=job, attempt=job.attempts).order_by("name", "step", "id")
    for name, step, value in points.values_list("name", "step", "value"):
        series[name].append((step, value))
    return dict(series)


def metric_version(*, job: Job) -> str:
    """Changes whenever the current attempt reports a metric point: the live charts redraw only then."""
    return f"{job.attempts}:{MetricPoint.objects.filter(job=job, attempt=job.attempts).count()}"


def latest_metrics(*, job: Job) -> dict[str, float]:
    return {name: points[-1][1] for name, points in metric_series(job=job).items()}


def metric_names(*, jobs: Iterable[Job]) -> list[str]:
    """The metric names any of `jobs` reported, sorted."""
    names = MetricPoint.objects.filter(job__in=list(jobs)).values_list("name", flat=True).distinct()
    return sorted(names)


@dataclass(frozen=True)
class Curve:
    job: Job
    points: list[tuple[int, float]]


def compare_curves(*, jobs: Iterable[Job], metric: str) -> list[Curve]:
    """One metric's points per job (each job's current attempt), in the order the jobs are given."""
    jobs = list(jobs)
    by_job: dict[Any, list[tuple[int, float]]] = {job.pk: [] for job in jobs}
    points = MetricPoint.objects.filter(job__in=jobs, name=metric, attempt=F("job__attempts")).order_by("step", "id")
    for job_id, step, value in points.values_list("job_id", "step", "value"):
        by_job[job_id].append((step, value))
    return [Curve(job=job, points=by_job[job.pk]) for job in jobs]


# --- Progress ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    """How far a job is: `done` of `total` (steps, or tasks for an eval), and the time left at the recent rate."""

    done: int | None
    total: int | None
    unit: str
    eta_seconds: float | None
    estimated_total: bool = False  # an SFT run's steps estimated from its epochs

    @property
    def percent(self) -> int | None:
        if self.done is None or not self.total:
            return None
        return max(0, min(100, round(100 * self.done / self.total)))

    @property
    def eta_at(self) -> datetime | None:
        return timezone.now() + timedelta(seconds=self.eta_seconds) if self.eta_seconds is not None else None


def job_progress(*, job: Job) -> Progress:
    if job.kind == JobKind.EVAL:
        return _eval_progress(job)
    if job.kind == JobKind.MINE:
        # A mine job logs the same progress lines; each prompt is sampled k times.
        return _eval_progress(job, unit="prompts")
    points = MetricPoint.objects.filter(job=job, attempt=job.attempts)
    first = points.order_by("step", "created_at").values_list("step", "created_at").first()
    # The time a step was first reported: later metrics of that step (held-out evals) come later.
    last = points.order_by("-step", "created_at").values_list("step", "created_at").first()
    total, estimated = planned_steps(job)
    done = last[0] if last else None
    if job.state == JobState.SUCCEEDED and isinstance(job.result.get("metrics"), dict):
        done = _int_or_none(job.result["metrics"].get("steps")) or done
    eta = None
    if first and last and total and not job.is_finished:
        eta = eta_seconds(first=first, last=last, total=total)
    return Progress(done=done, total=total, unit="steps", eta_seconds=eta, estimated_total=estimated)


def planned_steps(job: Job) -> tuple[int | None, bool]:
    """The run's step count from its hyperparameters; for an SFT or DPO run by epochs, an estimate from its tasks
    (or pairs)."""
    if job.kind not in (JobKind.SFT, JobKind.DPO, JobKind.GRPO):
        return None, False
    settings = {**_trainer_defaults(job.kind), **(job.hyperparameters or {})}
    max_steps = _int_or_none(settings.get("max_steps"))
    if max_steps and max_steps > 0:
        return max_steps, False
    if job.kind in (JobKind.SFT, JobKind.DPO):
        epochs = settings.get("num_train_epochs")
        batch = _int_or_none(settings.get("per_device_train_batch_size")) or 1
        if isinstance(epochs, int | float) and epochs > 0 and job.snapshot and job.snapshot.task_count:
            return math.ceil(math.ceil(job.snapshot.task_count / batch) * epochs), True
    return None, False


def _trainer_defaults(kind: str) -> dict[str, Any]:
    """The defaults of the trainer's config for `kind`, which a job's hyperparameters override."""
    return {item.name: item.default for item in fields(config_class(kind)) if item.default is not MISSING}


def eta_seconds(*, first: tuple[int, datetime], last: tuple[int, datetime], total: int) -> float | None:
    """Seconds until step `total` at the rate from `first` to `last` (step, time); None before a rate exists."""
    steps = last[0] - first[0]
    seconds = (last[1] - first[1]).total_seconds()
    if steps <= 0 or seconds <= 0:
        return None
    return max(0.0, (total - last[0]) * seconds / steps)


def _eval_progress(job: Job, unit: str = "answers") -> Progress:
    done = total = None
    for line in reversed(job.log_tail.splitlines()):
        match = _GENERATED.match(line.strip())
        if match:
            done, total = int(match.group(1)), int(match.group(2))
            break
    eta = None
    if done and total and job.started_at and not job.is_finished:
        # Measured from the start, so the model's loading time slows the estimate: it errs long.
        elapsed = (timezone.now() - job.started_at).total_seconds()
        eta = max(0.0, (total - done) * elapsed / done)
    return Progress(done=done, total=total, unit=unit, eta_seconds=eta)


def _int_or_none(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# --- Flags ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    name: str
    message: str

    @property
    def label(self) -> str:
        """`reward_hacking` as "Reward hacking"."""
        return self.name.replace("_", " ").capitalize()


def job_flags(*, job: Job) -> list[Flag]:
    """The trainer's warning flags: `flag: <name> <detail>` lines of the log tail, then any the result names.

    The log tail keeps its last lines only, so a flag raised early in a long run can scroll out;
    the done event's `metrics.flags` still names it.
    """
    flags: dict[str, Flag] = {}
    for line in job.log_tail.splitlines():
        if line.startswith(FLAG_PREFIX):
            name, _, detail = line[len(FLAG_PREFIX) :].strip().partition(" ")
            flags.setdefault(name, Flag(name=name, message=detail))
    metrics = job.result.get("metrics") if isinstance(job.result, dict) else None
    for name in (metrics or {}).get("flags") or []:
        flags.setdefault(str(name), Flag(name=str(name), message="raised during the run (see the trainer's log)"))
    return list(flags.values())


@dataclass(frozen=True)
class SkippedTasks:
    """Task lines the trainer could not read and skipped: how many, and the first few with their place and why."""

    count: int
    first: list[SkippedLine]

    @property
    def more(self) -> int:
        return self.count - len(self.first)


def job_skipped_tasks(*, job: Job) -> SkippedTasks | None:
    """The done event's `skipped_tasks` (trainer.spec.tasks), or None when the job skipped no task line."""
    metrics = job.result.get("metrics") if isinstance(job.result, dict) else None
    entry = metrics.get(SKIPPED_TASKS) if isinstance(metrics, dict) else None
    count = _int_or_none(entry.get("count")) if isinstance(entry, dict) else None
    if not isinstance(entry, dict) or not count:
        return None
    first = [SkippedLine(file=str(item.get("file", "")), line=_int_or_none(item.get("line")) or 0,
                         reason=str(item.get("reason", "")))
             for item in entry.get("first") or [] if isinstance(item, dict)]  # fmt: skip
    return SkippedTasks(count=count, first=first)


# --- Samples ----------------------------------------------------------------------------------


def job_samples(
    *,
    job: Job,
    step: int | None = None,
    min_reward: float | None = None,
    max_reward: float | None = None,
    component: str = "",
    component_min: float | None = None,
    component_max: float | None = None,
) -> QuerySet[Sample]:
    """The job's samples, newest checkpoint first; filtered by step, reward and one reward component's range.

    An episode's turns are left unread (`sample_episode` reads them); `has_episode` says whether there are any.
    """
    samples = Sample.objects.filter(job=job).defer("episode").annotate(
        has_episode=ExpressionWrapper(Q(episode__isnull=False), output_field=BooleanField()))
    if step is not None:
        samples = samples.filter(step=step)
    if min_reward is not None:
        samples = samples.filter(reward__gte=min_reward)
    if max_reward is not None:
        samples = samples.filter(reward__lte=max_reward)
    if component:
        # KeyTransform takes the key literally (no "__" path parsing), and comparing JSON numbers
        # never raises on a non-number the way a cast would.
        samples = samples.alias(component_value=KeyTransform(component, "components"))
        samples = samples.filter(component_value__isnull=False)
        if component_min is not None:
            samples = samples.filter(component_value__gte=component_min)
        if component_max is not None:
            samples = samples.filter(component_value__lte=component_max)
    return samples.order_by("-step", "reward", "id")


@dataclass(frozen=True)
class SampleEpisode:
    """One sampled training episode: the sample, the task's starting chat and the episode's turns as trace steps."""

    sample: Sample
    context: list[Step]
    steps: list[Step]


def sample_episode(*, job: Job, sample_id: int) -> SampleEpisode | None:
    """The job's sample `sample_id` as an episode; None when there is no such sample or it is one answer.

    The starting chat is the task's as the job's train snapshot holds it; messages the trace viewer
    cannot read raise the parser's RecordError.
    """
    sample = Sample.objects.filter(job=job, pk=sample_id).first()
    if sample is None or not isinstance(sample.episode, list):
        return None
    context = _task_chat(job.snapshot, sample.task_id)
    return SampleEpisode(sample=sample, context=context, steps=trace_steps(sample.episode, first=len(context)))


def _task_chat(snapshot: TaskSetSnapshot | None, task_id: str) -> list[Step]:
    item = snapshot.items.filter(content__id=task_id).first() if snapshot else None
    return trace_steps(item.content.get("messages") or []) if item else []


def sample_facets(*, job: Job) -> tuple[list[int], list[str]]:
    """The steps that have samples (newest first) and the reward components they carry, for the filter."""
    steps = Sample.objects.filter(job=job).values_list("step", flat=True).distinct().order_by("-step")
    names: set[str] = set()
    for components in Sample.objects.filter(job=job).values_list("components", flat=True):
        names.update(components or {})
    return list(steps), sorted(names)


# --- Evaluations ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rate:
    name: str
    label: str
    value: float | None
    low: float | None
    high: float | None
    n: int
    note: str = ""


@dataclass(frozen=True)
class BucketRates:
    bucket: str
    tasks: int
    rates: list[Rate]


@dataclass(frozen=True)
class ResultRow:
    """One per-task result line; `ended` in words where the result is an episode."""

    index: int
    result: dict[str, Any]
    ended: str


@dataclass(frozen=True)
class EvalReport:
    run: EvalRun
    rates: list[Rate]
    scalars: list[tuple[str, object]]
    buckets: list[BucketRates]
    rows: list[ResultRow]
    episodes: bool


def eval_run_for(*, job: Job) -> EvalRun | None:
    return EvalRun.objects.select_related("snapshot", "job").filter(job=job).first()


def _ended(result: Mapping[str, Any]) -> str:
    ended = str(result.get("ended") or "")
    return EPISODE_ENDS.get(ended, ended)


def _result_rows(results: list[Any]) -> list[ResultRow]:
    return [
        ResultRow(index=index, result=result, ended=_ended(result))
        for index, result in enumerate(results[:RESULTS_SHOWN])
        if isinstance(result, dict)
    ]


@dataclass(frozen=True)
class EpisodeView:
    """One evaluated episode: its result line, the task's starting chat and the episode's turns as trace steps."""

    index: int
    result: dict[str, Any]
    ended: str
    context: list[Step]
    steps: list[Step]


def eval_episode(*, run: EvalRun, index: int) -> EpisodeView | None:
    """The `index`th result of the run as an episode; None when there is no such result or it is not an episode.

    The starting chat is the task's as the run's snapshot holds it; messages the trace viewer cannot
    read raise the parser's RecordError.
    """
    results = run.results or []
    result = results[index] if 0 <= index < len(results) else None
    if not isinstance(result, dict) or not isinstance(result.get("episode"), list):
        return None
    context = _task_chat(run.snapshot, str(result.get("task_id")))
    return EpisodeView(index=index, result=result, ended=_ended(result), context=context,
                       steps=trace_steps(result["episode"], first=len(context)))  # fmt: skip


def approved_judge_agreement(*, agent: Agent) -> float | None:
    """The agreement of the agent's judge with reviewers where it is approved as a training reward; None
    otherwise (the rewards app answers `judge_agreement_requested`: training does not import it)."""
    answers = [answer for _, answer in judge_agreement_requested.send(sender=EvalRun, agent=agent)
               if answer is not None]  # fmt: skip
    return float(answers[0]) if answers else None


def agent_signals(*, agent: Agent | None, run: EvalRun) -> AgentSignals:
    """What the agent has for the recommendation: train preference pairs, reviewed failures per bucket,
    whether a programmatic check scored the run (it measured correct arguments), and its approved judge's
    agreement with reviewers."""
    correct = (run.metrics or {}).get("correct_arguments_rate") or {}
    if agent is None:
        return AgentSignals(verifier=correct.get("value") is not None)
    judge = approved_judge_agreement(agent=agent)
    pairs = PreferencePair.objects.filter(agent=agent, split=Split.TRAIN).count()
    assigned = BucketAssignment.objects.filter(trajectory__agent=agent).values_list("bucket__slug", flat=True)
    buckets: dict[str, int] = defaultdict(int)
    for slug in assigned:
        buckets[slug] += 1
    return AgentSignals(preference_pairs=pairs, verifier=correct.get("value") is not None,
                        judge_agreement=judge, failure_buckets=dict(buckets))  # fmt: skip


def eval_recommendation(*, run: EvalRun, rules: RecommendationRules | None = None) -> Recommendation:
    """The fixes that apply to the run's model, simplest first, from its metrics and what its agent has now."""
    agent = run.job.agent or run.snapshot.agent
    signals = agent_signals(agent=agent, run=run)
    return recommend(run.metrics or {}, rules, by_bucket=run.per_bucket or {}, signals=signals)


def snapshot_tool_descriptions(*, snapshot: TaskSetSnapshot) -> dict[str, str]:
    """Each tool the snapshot's tasks offer, with its description (the first task's where tasks differ)."""
    described: dict[str, str] = {}
    for tools in snapshot.items.annotate(tools=KeyTransform("tools", "content")).values_list("tools", flat=True):
        for tool in tools or []:
            function = tool.get("function", tool) if isinstance(tool, dict) else {}
            if function.get("name") and function["name"] not in described:
                described[str(function["name"])] = str(function.get("description") or "")
    return described


@dataclass(frozen=True)
class PromptChange:
    """What a prompt-change form starts from: the tasks' own system text, the tools as the prompt shows them."""

    system_text: str
    current: dict[str, str]  # each tool's description in the snapshot's tasks
    shown: dict[str, str]  # as the evaluated job showed them (its own overrides applied)
    preamble: str


def prompt_change_start(*, run: EvalRun) -> PromptChange:
    """The evaluated job's prompt as the form pre-fills it: its preamble and its tool descriptions."""
    settings = run.job.hyperparameters or {}
    current = snapshot_tool_descriptions(snapshot=run.snapshot)
    overrides = {name: text for name, text in (settings.get("tool_descriptions") or {}).items() if name in current}
    first = run.snapshot.items.annotate(messages=KeyTransform("messages", "content")).values_list(
        "messages", flat=True).first() or []  # fmt: skip
    system = next((str(m.get("content") or "") for m in first if isinstance(m, dict) and m.get("role") == "system"),
                  "")  # fmt: skip
    return PromptChange(system_text=system, current=current, shown={**current, **overrides},
                        preamble=str(settings.get("system_preamble") or ""))  # fmt: skip


def eval_runs_alongside(*, run: EvalRun, viewer: User) -> QuerySet[EvalRun]:
    """The other evaluations of the run's snapshot the viewer may see, newest first: what it can be paired with."""
    visible = job_visible(viewer=viewer)
    return (EvalRun.objects.filter(snapshot=run.snapshot, job__in=visible).exclude(pk=run.pk)
            .select_related("job").order_by("-created_at"))  # fmt: skip


def eval_report(*, run: EvalRun) -> EvalReport:
    """An EvalRun's JSON (trainer.evaluate's `overall` and `by_bucket`) as rows with their intervals."""
    metrics = run.metrics or {}
    scalars = [(label, metrics[name]) for name, label in EVAL_SCALARS if metrics.get(name) is not None]
    buckets = [
        BucketRates(bucket=name, tasks=int(values.get("tasks") or 0), rates=eval_rates(values))
        for name, values in sorted((run.per_bucket or {}).items())
    ]
    rates = eval_rates(metrics) + eval_rates(metrics, EVAL_EPISODE_RATES)
    rows = _result_rows(run.results or [])
    return EvalReport(run=run, rates=rates, scalars=scalars, buckets=buckets, rows=rows,
                      episodes=any(row.result.get("turns") is not None for row in rows))  # fmt: skip


def eval_rates(metrics: Mapping[str, Any], names: tuple[tuple[str, str], ...] = EVAL_RATES) -> list[Rate]:
    rates = []
    for name, label in names:
        entry = metrics.get(name)
        if not isinstance(entry, dict):
            continue
        rates.append(
            Rate(
                name=name,
                label=label,
                value=entry.get("value"),
                low=entry.get("low"),
                high=entry.get("high"),
                n=int(entry.get("n") or 0),
                note=str(entry.get("note") or ""),
            )
        )
    return rates


# --- Mining -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PassBin:
    """The tasks solved `solved` times of k, and whether the job's bounds kept them."""

    solved: int
    tasks: int
    kept: bool
    percent: int  # of all mined tasks, for the bar's width


@dataclass(frozen=True)
class MineSummary:
    samples: int
    tasks: int
    kept: int
    all_solved: int
    none_solved: int
    mean_pass_rate: float | None
    bins: list[PassBin]
    snapshot: TaskSetSnapshot | None


def mine_summary(*, job: Job) -> MineSummary | None:
    """A succeeded mine job's counts and pass@k histogram (from its done event) and the snapshot it froze."""
    metrics = job.result.get("metrics") if isinstance(job.result, dict) else None
    if job.kind != JobKind.MINE or job.state != JobState.SUCCEEDED or not isinstance(metrics, dict):
        return None
    histogram = metrics.get("histogram")
    if not isinstance(histogram, dict):
        histogram = {}
    tasks = _int_or_none(metrics.get("tasks")) or 0
    low, high = _int_or_none(metrics.get("min_solved")), _int_or_none(metrics.get("max_solved"))
    bins = [
        PassBin(solved=solved, tasks=count, kept=low is not None and high is not None and low <= solved <= high,
                percent=round(100 * count / tasks) if tasks else 0)
        for solved, count in sorted((int(key), int(value)) for key, value in histogram.items())
    ]  # fmt: skip
    rate = metrics.get("mean_pass_rate")
    return MineSummary(
        samples=_int_or_none(metrics.get("samples")) or 0, tasks=tasks, kept=_int_or_none(metrics.get("kept")) or 0,
        all_solved=_int_or_none(metrics.get("all_solved")) or 0,
        none_solved=_int_or_none(metrics.get("none_solved")) or 0,
        mean_pass_rate=float(rate) if isinstance(rate, int | float) else None, bins=bins,
        snapshot=job.mined_snapshot,
    )  # fmt: skip
