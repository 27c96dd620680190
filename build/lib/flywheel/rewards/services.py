"""Writes of the rewards app: profile a reward on sampled outputs, mark scores, re-verify.

`profile_create` reads the candidate outputs of a snapshot's tasks (an uploaded outputs file
in `python -m trainer verify`'s format, the assistant step of each task's source trajectory, or
a model's answers stored by a finished evaluation job, which ran it through the trainer),
samples them with a seed, scores them with trainer's verifiers or environments and stores
outputs and scores together. `reverify` re-scores a run's stored outputs under another
verifier, policy or environment: it copies them verbatim and never generates anything.
`mark_set` records a person's agree or disagree on one score. Every write is audited.
Scoring runs in the request: the verifiers are torch-free and score a hundred outputs in
milliseconds (the workbench sandbox in well under a second), so there is no job to queue.
The LLM judge is the exception: it loads a model, so `judge_run_launch` queues a `judge` job
(gpu queue) over the run's labelled outputs, and `judge_result_store` keeps its judgements when
the job ends (`training.signals.job_finished`). `on_job_launching` refuses a GRPO launch whose
reward is the judge while the judge is not approved (`selectors.judge_approval`).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction

from flywheel.core.models import Agent
from flywheel.core.services import Actor, actor_user, audit_record
from flywheel.datasets.models import SnapshotItem, TaskSetSnapshot
from flywheel.ingest.models import Step, StepKind
from flywheel.rewards.buckets import bucket_suggestions_store
from flywheel.rewards.judge_jobs import judge_job_launch
from flywheel.rewards.models import Judgement, JudgeRun, Mark, MarkVerdict, OutputSource, ProfiledOutput, ProfileRun
from flywheel.rewards.selectors import judge_approval, judge_settings, reviewer_labels
from flywheel.training.models import EvalRun, Job, JobKind, JobState
from flywheel.training.services import LaunchRefused
from flywheel.triage.services import policy_validate
from trainer.contracts import ContractError, Task, read_json_lines
from trainer.environments import environment_names, make_environment
from trainer.environments.batch import judge_outputs
from trainer.environments.workbench import WorkbenchDataMissing
from trainer.verifiers import get_verifier, verifier_names
from trainer.verifiers.base import Completion
from trainer.verifiers.batch import read_outputs
from trainer.verifiers.judge import JudgeItem
from trainer.verifiers.safety import SafetyPolicy

SAMPLE_MIN = 1
SAMPLE_MAX = 500  # a page of marks, not a benchmark: the guide profiles 50-100
ERRORS_KEPT = 20
_STEP_REF = re.compile(r"^step (\d+)$")
_RESPONSE_KINDS = (StepKind.ASSISTANT, StepKind.TOOL_CALL)


class ProfileRefused(ValueError):
    """The run cannot be made as asked (bad policy, no outputs, unknown verifier); the message says why."""


@dataclass(frozen=True)
class Scoring:
    """How a run scores: a verifier, a safety policy (trainer's JSON) and optionally an environment."""

    verifier: str
    policy: dict[str, Any]
    environment: str = ""


@dataclass(frozen=True)
class Candidate:
    """One output that may be sampled: the snapshot item it answers and where it came from."""

    item: SnapshotItem
    task_ref: str
    source_ref: str
    output: Completion


@dataclass(frozen=True)
class Score:
    reward: float
    passed: bool
    components: dict[str, float]
    verdict: dict[str, Any]


@dataclass
class SourceStats:
    """What reading the source found; stored on the run so the page can say what was skipped."""

    read: int = 0
    matched: int = 0
    unknown_ids: int = 0
    invalid: int = 0
    missing: int = 0
    errors: list[str] = field(default_factory=list)

    def note(self, message: str) -> None:
        if len(self.errors) < ERRORS_KEPT:
            self.errors.append(message)

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in ("read", "matched", "unknown_ids", "invalid", "missing", "errors")}


def output_sha256(output: Completion) -> str:
    """The hash that proves two rows hold the same output (canonical JSON of it)."""
    canonical = json.dumps(output, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


# --- scoring -------------------------------------------------------------------------------


def scoring_check(scoring: Scoring) -> SafetyPolicy:
    """The parsed policy, once the verifier, environment and policy are known to be usable."""
    if scoring.verifier not in verifier_names():
        raise ProfileRefused(f"unknown verifier {scoring.verifier!r}; known: {', '.join(verifier_names())}")
    if scoring.environment and scoring.environment not in environment_names():
        raise ProfileRefused(f"unknown environment {scoring.environment!r}; known: {', '.join(environment_names())}")
    try:
        return policy_validate(scoring.policy)
    except ValidationError as error:
        raise ProfileRefused(f"safety policy: {' '.join(error.messages)}") from None


def score_outputs(*, scoring: Scoring, items: Sequence[SnapshotItem], outputs: Sequence[Completion]) -> list[Score]:
    """One score per output (`items[i]` holds the task `outputs[i]` answers), as `trainer verify` scores."""
    policy = scoring_check(scoring)
    try:
        tasks = [Task.from_json(item.content) for item in items]
    except ContractError as error:
        raise ProfileRefused(f"a snapshot task is not a valid trainer task: {error}") from None
    if not scoring.environment:
        verdicts = get_verifier(scoring.verifier, policy).verify(tasks, list(outputs))
        return [Score(v.reward, v.passed, v.components, v.to_json()) for v in verdicts]
    try:
        environment = make_environment(scoring.environment, scoring.verifier, policy)
    except WorkbenchDataMissing as error:
        raise ProfileRefused(str(error)) from None
    judgements = judge_outputs(environment, tasks, list(outputs))
    return [Score(j.reward, j.passed, j.components, j.to_json()) for j in judgements]


# --- reading candidate outputs -------------------------------------------------------------


def _items_by_task_id(snapshot: TaskSetSnapshot) -> dict[str, SnapshotItem]:
    items: dict[str, SnapshotItem] = {}
    for item in snapshot.items.select_related("task").order_by("position"):
        items.setdefault(str(item.content.get("id", item.task.external_id)), item)
    return items


def upload_candidates(*, snapshot: TaskSetSnapshot, lines: Iterable[str]) -> tuple[list[Candidate], SourceStats]:
    """Every line of an outputs file (`{"id", "output"}`) whose id is one of the snapshot's tasks."""
    items = _items_by_task_id(snapshot)
    stats = SourceStats()
    numbered = [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]
    candidates: list[Candidate] = []
    # read_outputs numbers the non-blank lines it sees; the file's own numbers are kept here.
    for (number, _), (task_id, output, error) in zip(numbered, read_outputs(line for _, line in numbered), strict=True):
        stats.read += 1
        if error is not None:
            stats.invalid += 1
            stats.note(f"line {number}: {error.split(': ', 1)[-1]}")
        elif task_id not in items:
            stats.unknown_ids += 1
            stats.note(f"line {number}: no task {task_id} in the snapshot")
        else:
            candidates.append(Candidate(items[task_id], str(task_id), f"line {number}", output))
    stats.matched = len(candidates)
    return candidates, stats


def _call_json(step: Step) -> dict[str, Any]:
    # As the trajectory logged it: unreadable arguments stay unreadable, and the verifier says so.
    arguments = step.tool_arguments_raw or json.dumps(step.tool_arguments or {}, ensure_ascii=False)
    return {"id": step.tool_call_id, "type": "function", "function": {"name": step.tool_name, "arguments": arguments}}


def agent_response(steps: Sequence[Step], index: int) -> dict[str, Any] | None:
    """The assistant turn that starts at step `index`: its text and tool calls, as an OpenAI message."""
    turn = []
    for step in steps:
        if step.index < index:
            continue
        if step.kind not in _RESPONSE_KINDS:
            break
        turn.append(step)
    if not turn:
        return None
    text = "\n".join(step.text for step in turn if step.kind == StepKind.ASSISTANT and step.text)
    calls = [_call_json(step) for step in turn if step.kind == StepKind.TOOL_CALL]
    return {"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})}


def _steps_by_trajectory(trajectory_ids: set[Any]) -> dict[Any, list[Step]]:
    steps: dict[Any, list[Step]] = defaultdict(list)
    for step in Step.objects.filter(trajectory_id__in=trajectory_ids).order_by("trajectory_id", "index"):
        steps[step.trajectory_id].append(step)
    return steps


def trajectory_candidates(*, snapshot: TaskSetSnapshot) -> tuple[list[Candidate], SourceStats]:
    """For each task converted from a trajectory, what the agent answered at the task's step."""
    stats = SourceStats()
    items = list(snapshot.items.select_related("task").order_by("position"))
    steps = _steps_by_trajectory({item.task.source_trajectory_id for item in items} - {None})
    candidates: list[Candidate] = []
    for item in items:
        stats.read += 1
        match = _STEP_REF.match(item.task.source_ref)
        if item.task.source_trajectory_id is None or match is None:
            stats.missing += 1
            continue
        response = agent_response(steps[item.task.source_trajectory_id], int(match.group(1)))
        if response is None:
            stats.missing += 1
            stats.note(f"{item.task.external_id}: no assistant step at {match.group(0)}")
            continue
        ref = f"trajectory {item.task.source_trajectory_id} {match.group(0)}"
        candidates.append(Candidate(item, item.task.external_id, ref, response))
    stats.matched = len(candidates)
    return candidates, stats


def evaluation_candidates(*, snapshot: TaskSetSnapshot, evaluation: EvalRun) -> tuple[list[Candidate], SourceStats]:
    """The model's raw answer to each of the snapshot's tasks that the evaluation job ran."""
    items = _items_by_task_id(snapshot)
    stats = SourceStats()
    candidates: list[Candidate] = []
    for result in evaluation.results:
        stats.read += 1
        task_id = str(result.get("task_id", ""))
        if task_id not in items:
            stats.unknown_ids += 1
            stats.note(f"no task {task_id} in the snapshot")
        elif not isinstance(result.get("output"), str):
            stats.invalid += 1
            stats.note(f"{task_id}: the evaluation stored no output")
        else:
            source_ref = f"evaluation job {evaluation.job_id}"
            candidates.append(Candidate(items[task_id], task_id, source_ref, result["output"]))
    stats.matched = len(candidates)
    return candidates, stats


def sample_candidates(candidates: Sequence[Candidate], *, size: int, seed: int) -> list[Candidate]:
    """`size` candidates drawn with `seed` (all when there are fewer), kept in source order."""
    if len(candidates) <= size:
        return list(candidates)
    chosen = sorted(random.Random(seed).sample(range(len(candidates)), size))
    return [candidates[index] for index in chosen]


# --- writes --------------------------------------------------------------------------------


def _store_scores(run: ProfileRun, rows: Sequence[ProfiledOutput], scores: Sequence[Score]) -> None:
    for row, score in zip(rows, scores, strict=True):
        row.run, row.reward, row.passed = run, score.reward, score.passed
        row.components, row.verdict = score.components, score.verdict
    ProfiledOutput.objects.bulk_create(rows)


def _new_run(**fields: Any) -> ProfileRun:
    run = ProfileRun(**fields)
    run.full_clean()
    run.save()
    return run


@transaction.atomic
def profile_create(
    *,
    actor: Actor,
    snapshot: TaskSetSnapshot,
    scoring: Scoring,
    source_kind: str,
    sample_size: int,
    seed: int = 0,
    lines: Iterable[str] = (),
    evaluation: EvalRun | None = None,
    source_name: str = "",
    note: str = "",
) -> ProfileRun:
    """Sample up to `sample_size` outputs of the snapshot's tasks from the source and score them.

    The source is `lines` of an outputs file, the snapshot's source trajectories, or `evaluation`.
    """
    if not SAMPLE_MIN <= sample_size <= SAMPLE_MAX:
        raise ProfileRefused(f"the sample size must be between {SAMPLE_MIN} and {SAMPLE_MAX}")
    scoring_check(scoring)
    if source_kind == OutputSource.UPLOAD:
        candidates, stats = upload_candidates(snapshot=snapshot, lines=lines)
    elif source_kind == OutputSource.TRAJECTORIES:
        candidates, stats = trajectory_candidates(snapshot=snapshot)
    elif source_kind == OutputSource.EVALUATION and evaluation is not None:
        candidates, stats = evaluation_candidates(snapshot=snapshot, evaluation=evaluation)
        source_name = source_name or f"evaluation job {evaluation.job_id} ({evaluation.model_label})"
    elif source_kind == OutputSource.EVALUATION:
        raise ProfileRefused("choose the evaluation whose answers to profile")
    else:
        raise ProfileRefused(f"unknown source {source_kind!r}")
    if not candidates:
        detail = "; ".join(stats.errors[:3])
        raise ProfileRefused(f"no output answers a task of the snapshot{': ' + detail if detail else ''}")
    sampled = sample_candidates(candidates, size=sample_size, seed=seed)
    scores = score_outputs(scoring=scoring, items=[c.item for c in sampled], outputs=[c.output for c in sampled])
    run = _new_run(
        snapshot=snapshot, verifier=scoring.verifier, policy=scoring.policy, environment=scoring.environment,
        source_kind=source_kind, source_name=source_name[:255], source_stats=stats.to_json(),
        sample_size=sample_size, seed=seed, note=note[:500], created_by=actor_user(actor),
    )  # fmt: skip
    rows = [
        ProfiledOutput(position=position, item=c.item, task=c.item.task, task_ref=c.task_ref[:255],
                       source_ref=c.source_ref[:255], output=c.output, output_sha256=output_sha256(c.output))
        for position, c in enumerate(sampled)
    ]  # fmt: skip
    _store_scores(run, rows, scores)
    audit_record(actor=actor, action="reward_profile.create", target=run, data=_audit_data(run, len(rows)))
    return run


@transaction.atomic
def reverify(*, actor: Actor, run: ProfileRun, scoring: Scoring, note: str = "") -> ProfileRun:
    """A new run scoring exactly `run`'s outputs (copied, never regenerated) under `scoring`."""
    originals = list(run.outputs.select_related("item", "task").order_by("position"))
    scores = score_outputs(scoring=scoring, items=[o.item for o in originals], outputs=[o.output for o in originals])
    child = _new_run(
        snapshot=run.snapshot, verifier=scoring.verifier, policy=scoring.policy, environment=scoring.environment,
        source_kind=run.source_kind, source_name=run.source_name, source_stats=run.source_stats,
        parent=run, root_id=run.family_id, sample_size=run.sample_size, seed=run.seed, note=note[:500],
        created_by=actor_user(actor),
    )  # fmt: skip
    rows = [
        ProfiledOutput(position=o.position, origin_id=o.origin_key, item=o.item, task=o.task, task_ref=o.task_ref,
                       source_ref=o.source_ref, output=o.output, output_sha256=o.output_sha256)
        for o in originals
    ]  # fmt: skip
    _store_scores(child, rows, scores)
    data = {**_audit_data(child, len(rows)), "parent": str(run.pk)}
    audit_record(actor=actor, action="reward_profile.reverify", target=child, data=data)
    return child


def _audit_data(run: ProfileRun, outputs: int) -> dict[str, Any]:
    return {"snapshot": run.snapshot.content_hash, "verifier": run.verifier, "environment": run.environment,
            "policy": run.policy.get("name", "custom"), "source": run.source_kind, "outputs": outputs,
            "sample_size": run.sample_size, "seed": run.seed}  # fmt: skip


@transaction.atomic
def mark_set(*, actor: User, output: ProfiledOutput, verdict: str, note: str = "") -> Mark:
    """Record (or change) `actor`'s agree / disagree on one score, with an optional note."""
    if verdict not in MarkVerdict.values:
        raise ProfileRefused(f"a mark is agree or disagree, not {verdict!r}")
    mark = Mark.objects.select_for_update().filter(output=output, reviewer=actor).first()
    mark = mark or Mark(output=output, reviewer=actor)
    mark.verdict, mark.note = verdict, note.strip()
    mark.full_clean()
    mark.save()
    data = {"output": output.pk, "task": output.task_ref, "verdict": verdict, "reward": output.reward}
    audit_record(actor=actor, action="reward_mark.set", target=output.run, data=data)
    return mark


# --- the LLM judge ------------------------------------------------------------------------------------


def judge_item(output: ProfiledOutput) -> dict[str, Any]:
    """One judge item (`trainer.spec.judge`): the task's conversation and the output as the answer to grade."""
    answer = output.output
    if isinstance(answer, list):  # a list of calls: as the assistant message that made them
        answer = {"role": "assistant", "content": None, "tool_calls": answer}
    return JudgeItem(id=str(output.pk), messages=output.item.content["messages"], answer=answer).to_json()


@transaction.atomic
def judge_run_launch(*, actor: User, run: ProfileRun) -> JudgeRun:
    """Have the agent's judge score the run's outputs that reviewers labelled, as a `judge` job on the gpu queue."""
    agent = run.snapshot.agent
    if agent is None:
        raise ProfileRefused("this run's snapshot belongs to no agent, and a judge is an agent's")
    labels = reviewer_labels(run=run)
    if not labels:
        raise ProfileRefused("no output of this run is marked yet: the judge is measured against reviewers' marks")
    outputs = run.outputs.filter(pk__in=labels).select_related("item").order_by("position")
    try:
        job = judge_job_launch(actor=actor, agent=agent, items=[judge_item(output) for output in outputs])
    except LaunchRefused as error:
        raise ProfileRefused(str(error)) from None
    judge_run = JudgeRun.objects.create(run=run, job=job, base_model=job.base_model, adapter=job.adapter,
                                        rubric=job.hyperparameters["rubric"], created_by=actor)  # fmt: skip
    audit_record(actor=actor, action="judge.launch", target=judge_run, data={"outputs": len(labels)})
    return judge_run


@transaction.atomic
def judge_result_store(*, job: Job) -> int:
    """Store a succeeded judge job's judgements on its judge run's outputs, once; how many were stored."""
    judge_run = JudgeRun.objects.select_for_update().filter(job=job).first()
    if judge_run is None or job.state != JobState.SUCCEEDED or judge_run.judgements.exists():
        return 0
    outputs = set(judge_run.run.outputs.values_list("pk", flat=True))
    rows = []
    for line in read_json_lines(job.result["results"]):
        output_id = int(line["id"])
        if output_id in outputs:
            rows.append(Judgement(judge_run=judge_run, output_id=output_id, score=line["score"],
                                  passed=line["passed"], reason=line["reason"], raw=line["raw"]))  # fmt: skip
    Judgement.objects.bulk_create(rows)
    return len(rows)


def on_job_finished(sender: object, job: Job, **kwargs: Any) -> None:
    """`job_finished` receiver: keep a judge job's judgements (a judge run's, or a bucket judging's as
    suggestions); a results file that cannot be read is logged."""
    if job.kind != JobKind.JUDGE:
        return
    try:
        with transaction.atomic():
            judge_result_store(job=job)
            bucket_suggestions_store(job=job)
    except (OSError, KeyError, ValueError, TypeError, ContractError) as error:
        audit_record(actor=None, action="judge.store_failed", target=job, data={"error": str(error)[:1000]})


def on_judge_agreement_requested(sender: object, agent: Agent, **kwargs: Any) -> float | None:
    """`judge_agreement_requested` receiver: the agent's judge's agreement with reviewers, where it is approved
    as a training reward (what the recommendation may count on); None otherwise."""
    approval = judge_approval(agent=agent)
    if not approval.approved or approval.agreement is None or approval.agreement.rate is None:
        return None
    return approval.agreement.rate.value


def on_job_launching(sender: object, kind: str, agent: Agent | None, hyperparameters: dict[str, Any],
                     **kwargs: Any) -> dict[str, Any] | None:  # fmt: skip
    """`job_launching` receiver: a GRPO launch with the judge as its reward needs the agent's judge approved,
    and gets that judge (the model, adapter and rubric the approval measured), whatever the launch named.

    The launch's `judge_mode` is kept: group mode (the judge scores each prompt's completions together)
    runs the same approved judge, though the agreement that approved it was measured on single answers."""
    if kind != JobKind.GRPO or hyperparameters.get("reward") != "judge":
        return None
    if agent is None:
        raise LaunchRefused("the judge reward is an agent's judge: launch on a snapshot of an agent")
    approval = judge_approval(agent=agent)
    if not approval.approved:
        raise LaunchRefused(f"the judge is not approved as a training reward: {approval.reason}")
    judge = judge_settings(agent=agent)
    return {"judge_model": judge.base_model, "judge_adapter": judge.adapter, "judge_rubric": judge.rubric}
