"""The demo: real data loaded once, then the flywheel's loop run on it through the ordinary services.

`demo_data_ensure` loads what `make demo` promises: tau-bench's real GPT-4o airline trajectories
(ingested, so triage suggestions run on them), BFCL simple_python as the `function-caller`
agent's train (300) and held-out (100) tasks, and WorkBench's single-call tasks as the
`workplace` agent's, split by template; then a snapshot of each split. The splits are the ones
of the CPU learning run (`trainer.spec.bfcl.bfcl_split`, `trainer.spec.workbench.workbench_split`),
so the demo's numbers and the README's are over the same tasks. Each part is skipped when it is already there.

`demo_loop` runs the guide's loop for `function-caller` as jobs on the worker, each one visible
on the Jobs page while it runs: a baseline evaluation on the held-out set, SFT on the train set,
GRPO from the SFT adapter, a gate of the GRPO version against the live version (or the base
model), and promotion when the gate passes. A step whose job already succeeded with the same
settings is reused, so a second run picks up where the first stopped. Sizes fit a 2-core CPU in
well under 30 minutes; they are no recipe for a real run.

`demo_advance` is one non-blocking look at the loop; the command calls it and waits between
steps, and the home page's button (admins) queues it as a task that every succeeded demo job
queues again (`job_finished`), so the loop runs on with nobody watching. A failed step stops
the loop; asking again (the button, the command) launches it anew.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from flywheel.core.models import Agent
from flywheel.core.services import agent_create
from flywheel.datasets.importers import Candidate
from flywheel.datasets.models import RegressionTask, Split, TaskSetSnapshot
from flywheel.datasets.services import snapshot_create, tasks_import
from flywheel.ingest.models import Trajectory
from flywheel.ingest.parsers import FieldMapping
from flywheel.ingest.services import IngestOptions, stream_ingest
from flywheel.registry import selectors as registry_selectors
from flywheel.registry import services as registry_services
from flywheel.registry.models import Deployment, GateResult, GateStatus, ModelVersion
from flywheel.training.models import Job, JobKind, JobState
from flywheel.training.services import job_launch
from trainer.contracts import Task
from trainer.spec.bfcl import bfcl_split
from trainer.spec.workbench import workbench_split, workbench_templates

Log = Callable[[str], None]

AIRLINE = "airline"
FUNCTION_CALLER = "function-caller"
WORKPLACE = "workplace"
TAU_MAPPING = {"messages": "traj", "outcome": "reward", "id": "task_id,trial"}
BASE_MODEL = "demo"
POLL_SECONDS = 5.0
JOB_TIMEOUT_SECONDS = 3 * 3600

@dataclass(frozen=True)
class Sizes:
    """Each step's hyperparameters (the gate's are its evaluation options)."""

    eval: dict[str, Any]
    sft: dict[str, Any]
    grpo: dict[str, Any]
    gate: dict[str, Any]


EVAL = {"verifier": "tool_call", "sample_size": 30, "batch_size": 8, "max_new_tokens": 96, "device": "cpu"}
# Length limits unset: the trainer derives them from the train answers (a fixed 64 cut 43 of 400 BFCL answers).
SFT = {"max_steps": 20, "learning_rate": 3e-4, "per_device_train_batch_size": 4, "eval_interval": 20,
       "heldout_sample_size": 16, "checkpoint_interval": 10, "device": "cpu"}  # fmt: skip
GRPO = {"max_steps": 8, "num_generations": 4, "learning_rate": 5e-5, "eval_interval": 8, "heldout_sample_size": 16,
        "checkpoint_interval": 4, "sample_events": 4, "device": "cpu"}  # fmt: skip
GATE = {"heldout_sample_size": 30, "regression_sample_size": 30, "batch_size": 8, "max_new_tokens": 96,
        "device": "cpu"}  # fmt: skip
DEMO_SIZES = Sizes(eval=EVAL, sft=SFT, grpo=GRPO, gate=GATE)
DEMO_TRAINER, DEMO_APPROVER = "demo-trainer", "demo-approver"


class DemoFailed(RuntimeError):
    """A step of the loop did not succeed; the message names the job and its error."""


@dataclass(frozen=True)
class DemoSnapshots:
    train: TaskSetSnapshot
    heldout: TaskSetSnapshot


@dataclass(frozen=True)
class DemoPeople:
    """Who launches the jobs and who promotes: the demo's trainer and approver users."""

    trainer: User
    approver: User


# --- Data -------------------------------------------------------------------------------------


def _agent(name: str, description: str) -> Agent:
    return Agent.objects.filter(name=name).first() or agent_create(actor=None, name=name, description=description)


def _ingest_airline(external: Path, log: Log) -> None:
    if Trajectory.objects.filter(agent__name=AIRLINE).exists():
        log("tau-bench airline trajectories: already ingested")
        return
    options = IngestOptions(format="openai-chat", mapping=FieldMapping.from_pairs(TAU_MAPPING), agent=AIRLINE)
    with (external / "tau_bench" / "gpt-4o-airline.json").open("rb") as stream:
        report = stream_ingest(stream=stream, options=options)
    log(f"tau-bench airline trajectories: {report.stored} stored, {report.rejected} rejected")


def _import(agent: Agent, split: str, candidates: Sequence[Candidate], source: str, log: Log) -> None:
    if RegressionTask.objects.filter(agent=agent, split=split).exists():
        log(f"{agent.name} {split} tasks: already imported")
        return
    report = tasks_import(actor=None, candidates=candidates, split=split, agent=agent, source_ref=source)
    log(f"{agent.name} {split} tasks: {report.imported} imported, {report.refused + report.rejected} refused")


def _candidates(tasks: Sequence[Task], templates: dict[str, str] | None = None) -> list[Candidate]:
    return [
        Candidate(number, task, template=(templates or {}).get(task.id, ""))
        for number, task in enumerate(tasks, start=1)
    ]


def _snapshot(agent: Agent, split: str) -> TaskSetSnapshot:
    """The snapshot of all the agent's tasks in the split (the same tasks give the same snapshot)."""
    return snapshot_create(actor=None, name=_snapshot_name(agent.name, split), split=split, agent=agent)


def _snapshot_name(agent_name: str, split: str) -> str:
    return f"{agent_name} {split}"


def demo_data_ensure(*, external: Path, log: Log) -> DemoSnapshots:
    """Load the demo's trajectories and tasks where they are missing; the function-caller snapshots."""
    _agent(AIRLINE, "tau-bench's airline customer-service agent (real GPT-4o trajectories)")
    _ingest_airline(external, log)
    caller = _agent(FUNCTION_CALLER, "Picks one Python function and its arguments (BFCL simple_python)")
    train, heldout = bfcl_split(external)
    _import(caller, Split.TRAIN, _candidates(train), "BFCL_v4_simple_python.json", log)
    _import(caller, Split.HELDOUT, _candidates(heldout), "BFCL_v4_simple_python.json", log)
    workplace = _agent(WORKPLACE, "WorkBench's workplace assistant (calendar, email, CRM, projects, analytics)")
    templates = workbench_templates(external)
    wb_train, wb_heldout, _ = workbench_split(external)
    _import(workplace, Split.TRAIN, _candidates(wb_train, templates), "WorkBench single-call", log)
    _import(workplace, Split.HELDOUT, _candidates(wb_heldout, templates), "WorkBench single-call", log)
    for agent in (workplace, caller):
        for split in (Split.TRAIN, Split.HELDOUT):
            log(f"snapshot {_snapshot(agent, split)}")
    return DemoSnapshots(train=_snapshot(caller, Split.TRAIN), heldout=_snapshot(caller, Split.HELDOUT))


def demo_snapshots() -> DemoSnapshots | None:
    """The function-caller snapshots `demo_data_ensure` froze, found without reading the data again; None before."""
    found = {
        split: TaskSetSnapshot.objects.filter(agent__name=FUNCTION_CALLER, split=split,
                                              name=_snapshot_name(FUNCTION_CALLER, split))
        .order_by("-created_at").first()
        for split in (Split.TRAIN, Split.HELDOUT)
    }  # fmt: skip
    train, heldout = found[Split.TRAIN], found[Split.HELDOUT]
    return DemoSnapshots(train=train, heldout=heldout) if train and heldout else None


# --- The loop ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One job of the loop: what it runs, on which model, with what."""

    kind: str
    base_model: str
    hyperparameters: dict[str, Any]
    adapter: str = ""


def _reusable(step: Step, snapshot: TaskSetSnapshot) -> Job | None:
    """A job of the same kind and settings that succeeded or is still going."""
    candidates = Job.objects.filter(
        kind=step.kind, snapshot=snapshot, base_model=step.base_model, adapter=step.adapter
    ).exclude(
        state__in=[JobState.FAILED, JobState.CANCELLED]
    )
    same = (job for job in candidates.order_by("-created_at") if job.hyperparameters == step.hyperparameters)
    return next(same, None)


def wait_for(job: Job, log: Log, *, timeout: float = JOB_TIMEOUT_SECONDS) -> Job:
    """Poll the job until it finishes; DemoFailed unless it succeeded."""
    deadline, last = time.monotonic() + timeout, ""
    while True:
        job.refresh_from_db()
        status = f"{job} {job.get_state_display().lower()}"
        if status != last:
            log(status)
            last = status
        if job.is_finished:
            break
        if time.monotonic() > deadline:
            raise DemoFailed(f"{job} did not finish within {timeout:.0f} s; is a worker serving the gpu queue?")
        time.sleep(POLL_SECONDS)
    if job.state != JobState.SUCCEEDED:
        raise DemoFailed(f"{job} {job.state}: {job.error or 'see its page'}")
    return job


def _job_for(step: Step, snapshots: DemoSnapshots, trainer: User, log: Log) -> Job:
    """The step's job: the one already there, or a new one."""
    evaluation = step.kind == JobKind.EVAL
    snapshot = snapshots.heldout if evaluation else snapshots.train
    job = _reusable(step, snapshot)
    if job is None:
        job = job_launch(
            actor=trainer, kind=step.kind, snapshot=snapshot, base_model=step.base_model, adapter=step.adapter,
            agent=snapshot.agent, hyperparameters=step.hyperparameters,
            heldout_snapshot=None if evaluation else snapshots.heldout,
        )  # fmt: skip
        log(f"launched {job}")
    return job


def _succeeded(job: Job) -> bool:
    """True once the job succeeded, False while it runs; DemoFailed when it ended otherwise."""
    job.refresh_from_db()
    if job.is_finished and job.state != JobState.SUCCEEDED:
        raise DemoFailed(f"{job} {job.state}: {job.error or 'see its page'}")
    return job.is_finished


def _adapter_of(job: Job) -> str:
    return str(((job.result or {}).get("files") or {}).get("adapter_dir") or "")


def _version_of(job: Job) -> ModelVersion:
    version = ModelVersion.objects.filter(training_job=job).first()
    if version is None:
        raise DemoFailed(f"{job} succeeded but registered no version (see the audit log)")
    return version


def _gate_for(version: ModelVersion, snapshots: DemoSnapshots, options: dict[str, Any], trainer: User,
              log: Log) -> GateResult:  # fmt: skip
    gate = GateResult.objects.filter(candidate=version).exclude(status=GateStatus.ERROR).order_by("-created_at").first()
    if gate is None:
        gate = registry_services.gate_launch(actor=trainer, candidate=version, heldout_snapshot=snapshots.heldout,
                                             options=options)  # fmt: skip
        log(f"launched the gate of {version.tag}")
    return gate


def _decide(gate: GateResult, approver: User, log: Log) -> None:
    """Promote a passed candidate once; a later rollback by a person is never undone here."""
    version = gate.candidate
    if Deployment.objects.filter(to_version=version).exists():
        return
    for criterion in gate.criteria:
        log(f"  {'pass' if criterion.get('passed') else 'FAIL'} {criterion.get('name')}: {criterion.get('reason')}")
    if gate.passed:
        live = registry_selectors.live_version(agent=version.agent)
        registry_services.version_promote(actor=approver, version=version, expected_live=live)
        log(f"promoted {version.tag}: the chat endpoint now answers from it")
    else:
        log(f"{version.tag} stays unpromoted: {gate.decision.get('summary', 'the gate did not pass')}")


@dataclass(frozen=True)
class Progress:
    """Where the loop stands: the job it waits for, or the gate it ended with."""

    waiting_for: Job | None = None
    gate: GateResult | None = None


def demo_advance(
    *, snapshots: DemoSnapshots, people: DemoPeople, log: Log, base_model: str = BASE_MODEL,
    sizes: Sizes = DEMO_SIZES,
) -> Progress:  # fmt: skip
    """Look once: launch the next step when the one before succeeded, decide after the gate; never wait.

    Under a row lock on the train snapshot, so two advances at once (the command and a finished job's
    signal) launch each step once.
    """
    trainer = people.trainer
    with transaction.atomic():
        TaskSetSnapshot.objects.select_for_update().get(pk=snapshots.train.pk)
        baseline = _job_for(Step(JobKind.EVAL, base_model, sizes.eval), snapshots, trainer, log)
        if not _succeeded(baseline):
            return Progress(waiting_for=baseline)
        sft = _job_for(Step(JobKind.SFT, base_model, sizes.sft), snapshots, trainer, log)
        if not _succeeded(sft):
            return Progress(waiting_for=sft)
        grpo = _job_for(Step(JobKind.GRPO, base_model, sizes.grpo, _adapter_of(sft)), snapshots, trainer, log)
        if not _succeeded(grpo):
            return Progress(waiting_for=grpo)
        gate = _gate_for(_version_of(grpo), snapshots, sizes.gate, trainer, log)
        if not _succeeded(gate.job):
            return Progress(waiting_for=gate.job)
        gate.refresh_from_db()
        _decide(gate, people.approver, log)
        return Progress(gate=gate)


def demo_loop(
    *, snapshots: DemoSnapshots, people: DemoPeople, log: Log, base_model: str = BASE_MODEL,
    sizes: Sizes = DEMO_SIZES,
) -> GateResult:  # fmt: skip
    """Baseline, SFT, GRPO, gate, and promotion when the gate passes, waiting for each; returns the gate."""
    while True:
        progress = demo_advance(snapshots=snapshots, people=people, log=log, base_model=base_model, sizes=sizes)
        if progress.gate is not None:
            return progress.gate
        assert progress.waiting_for is not None
        wait_for(progress.waiting_for, log)


def demo_people() -> DemoPeople:
    """The demo's trainer and approver (`manage.py demo_users` makes them; never in production)."""
    users = {user.username: user for user in User.objects.filter(username__in=[DEMO_TRAINER, DEMO_APPROVER])}
    if len(users) < 2:
        raise DemoFailed("the demo users are missing: run `make demo` (or `manage.py demo_users`) first")
    return DemoPeople(trainer=users[DEMO_TRAINER], approver=users[DEMO_APPROVER])
