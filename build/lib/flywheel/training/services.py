"""Writes of the training app: launch, claim, events, heartbeat, cancel, finish, reap; a mine job's snapshot.

State changes are guarded updates (healthchecks' habit): a job is claimed only from `queued`, a
redelivered message for a running or finished job claims nothing and does nothing, and the
reaper requeues only jobs whose heartbeat went stale.

Messages follow the outbox pattern: the row is committed first, then `job_dispatch` hands its
message to the broker and marks it dispatched, logging (not raising) a refusal; `jobs_redispatch`
re-sends queued jobs whose message was never sent or was sent long ago and never claimed.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from flywheel.core.environments import allowed_environment
from flywheel.core.models import Agent
from flywheel.core.services import Actor, actor_user, audit_record, outbox_due, outbox_send
from flywheel.datasets.models import SnapshotKind, Split, TaskSetSnapshot
from flywheel.datasets.services import snapshot_subset_create
from flywheel.training.models import (
    CASE_KINDS,
    FINISHED_STATES,
    TRAINING_KINDS,
    EvalRun,
    Job,
    JobKind,
    JobState,
    MetricPoint,
    Sample,
)
from flywheel.training.signals import job_finished, job_launching
from trainer.contracts import (
    CheckpointEvent,
    ContractError,
    DoneEvent,
    ErrorEvent,
    JobEvent,
    LogEvent,
    MetricEvent,
    SampleEvent,
    read_json_lines,
)
from trainer.spec.config import SpecError, config_from_json
from trainer.spec.kinds import config_class
from trainer.spec.replay import ReplayCase
from trainer.verifiers.judge import JudgeItem

# The kinds trainer runs today.
RUNNABLE_KINDS = (
    JobKind.EVAL, JobKind.SFT, JobKind.DPO, JobKind.GRPO, JobKind.GATE, JobKind.MINE, JobKind.REPLAY, JobKind.SYNTH,
    JobKind.JUDGE,
)  # fmt: skip
LOG_TAIL_LINES = 200


class LaunchRefused(ValueError):
    """The launch request is invalid; the message says why, before anything is queued."""


@transaction.atomic
def job_launch(
    *,
    actor: Actor,
    kind: str,
    snapshot: TaskSetSnapshot | None,
    base_model: str,
    adapter: str = "",
    agent: Agent | None = None,
    hyperparameters: dict[str, Any] | None = None,
    heldout_snapshot: TaskSetSnapshot | None = None,
    regression_snapshot: TaskSetSnapshot | None = None,
    cases: list[dict[str, Any]] | None = None,
) -> Job:
    """Queue a job: on `snapshot`, or for a replay or a judge job on the `cases` it carries (`trainer.spec`).

    A `job_launching` receiver may refuse the launch with a LaunchRefused, before anything is saved.
    """
    if kind not in RUNNABLE_KINDS:
        raise LaunchRefused(f"{kind!r} jobs cannot run; runnable kinds: {', '.join(RUNNABLE_KINDS)}")
    if not base_model.strip():
        raise LaunchRefused("a base model is required (a local folder, a .gguf file or 'demo')")
    if kind == JobKind.GATE and not adapter.strip():
        raise LaunchRefused("a gate compares a candidate adapter with its baseline: name the candidate's adapter")
    if not isinstance(hyperparameters or {}, dict):
        raise LaunchRefused("hyperparameters must be a JSON object")
    _check_input(kind, snapshot, cases or [])
    _check_snapshot_kinds(kind, snapshot, heldout_snapshot, regression_snapshot)
    owner = agent or (snapshot.agent if snapshot else None)
    hyperparameters = _with_agent_environment(kind, hyperparameters or {}, owner)
    # Higher apps veto or complete what only they know (the rewards app: a GRPO reward from the agent's judge).
    for _, added in job_launching.send(sender=Job, kind=kind, agent=owner, hyperparameters=hyperparameters):
        if isinstance(added, dict):
            hyperparameters = {**hyperparameters, **added}
    _check_hyperparameters(kind, hyperparameters)
    # (`_check_input` has refused these kinds without a snapshot.)
    if kind in TRAINING_KINDS and snapshot is not None:
        _check_training_snapshots(snapshot, heldout_snapshot)
    if kind == JobKind.MINE and snapshot is not None:
        _check_mine_snapshots(snapshot, heldout_snapshot, regression_snapshot)
    if kind == JobKind.SYNTH and snapshot is not None:
        _check_synth_snapshots(snapshot, heldout_snapshot)
    job = Job(
        kind=kind, snapshot=snapshot, heldout_snapshot=heldout_snapshot, regression_snapshot=regression_snapshot,
        base_model=base_model.strip(), adapter=adapter.strip(), agent=agent, cases=cases or [],
        hyperparameters=hyperparameters or {}, launched_by=actor_user(actor),
        max_attempts=settings.JOB_MAX_ATTEMPTS,
    )  # fmt: skip
    job.full_clean()
    job.save()
    audit_record(actor=actor, action="job.launch", target=job,
                 data={"kind": kind, "snapshot": snapshot.content_hash if snapshot else None})  # fmt: skip
    # Sent after the commit; a broker that cannot take it leaves the job queued for the sweeper, and no error.
    transaction.on_commit(lambda: job_dispatch(job_id=job.id), robust=True)
    return job


def job_dispatch(*, job_id: Any) -> bool:
    """Hand the job's message to the broker and mark it dispatched; False (logged) when the broker refused."""
    from flywheel.training.tasks import run_job

    return outbox_send(send=run_job.delay, model=Job, row_id=job_id)


def jobs_redispatch(*, resend_after: timedelta | None = None, grace: timedelta | None = None) -> list[Any]:
    """Re-send queued jobs whose message may be lost; the ids sent.

    Never sent (a broker outage at launch or at the reaper's requeue) once `grace` has passed, or
    sent longer than `resend_after` ago and still unclaimed. A duplicate is harmless: the claim
    moves a job out of `queued` once.
    """
    waiting = outbox_due(since="updated_at", resend_after=resend_after, grace=grace)
    queued = Job.objects.filter(waiting, state=JobState.QUEUED, cancel_requested=False).order_by("created_at")
    ids = list(queued.values_list("pk", flat=True)[: settings.DISPATCH_SWEEP_LIMIT])
    return [pk for pk in ids if job_dispatch(job_id=pk)]


# The kinds that train on a snapshot of preference pairs (`datasets.SnapshotKind.PAIRS`) instead of tasks.
PAIR_KINDS = ("dpo",)


def _check_snapshot_kinds(kind: str, snapshot: TaskSetSnapshot | None, *checked: TaskSetSnapshot | None) -> None:
    """Pairs feed only the kinds that train on pairs; a held-out or regression snapshot is always one of tasks."""
    if snapshot is not None and (snapshot.kind == SnapshotKind.PAIRS) != (kind in PAIR_KINDS):
        wanted = "preference pairs" if kind in PAIR_KINDS else "tasks"
        raise LaunchRefused(f"a {kind} job runs on a snapshot of {wanted}; {snapshot} is not one")
    for other in checked:
        if other is not None and other.kind == SnapshotKind.PAIRS:
            raise LaunchRefused(f"{other} holds preference pairs: a held-out or regression snapshot holds tasks")


def _check_synth_snapshots(snapshot: TaskSetSnapshot, heldout_snapshot: TaskSetSnapshot | None) -> None:
    """A synth job varies train tasks (its variants enter train only); held-out tasks only guard against leaks."""
    if snapshot.split != Split.TRAIN:
        raise LaunchRefused(f"a synth job varies train tasks: {snapshot} is a held-out snapshot")
    if heldout_snapshot is not None and heldout_snapshot.split != Split.HELDOUT:
        raise LaunchRefused(f"{heldout_snapshot} is not a held-out snapshot")


def _check_input(kind: str, snapshot: TaskSetSnapshot | None, cases: list[dict[str, Any]]) -> None:
    """A replay or a judge job carries its cases and no snapshot; every other kind runs on a snapshot, no cases."""
    if kind not in CASE_KINDS:
        if snapshot is None:
            raise LaunchRefused(f"a {kind} job runs on a snapshot: name one")
        if cases:
            raise LaunchRefused(f"a {kind} job runs on its snapshot and takes no cases")
        return
    if snapshot is not None or not cases:
        raise LaunchRefused(f"a {kind} job answers the cases it is given, not a snapshot")
    read = ReplayCase.from_json if kind == JobKind.REPLAY else JudgeItem.from_json
    try:
        for case in cases:
            read(case)
    except (ContractError, TypeError, AttributeError) as error:
        raise LaunchRefused(f"a {kind} case is not valid: {error}") from None


def _check_hyperparameters(kind: str, hyperparameters: dict[str, Any]) -> None:
    """The trainer's own typed config rejects what the job would reject, before anything is queued."""
    fields = {key: value for key, value in hyperparameters.items() if key != "seed"}
    try:
        config_from_json(config_class(kind), fields, f"{kind} hyperparameters")
    except SpecError as error:
        raise LaunchRefused(str(error)) from None
    name = fields.get("environment")
    if isinstance(name, str):
        try:
            allowed_environment(name)
        except ValidationError as error:
            raise LaunchRefused(error.messages[0]) from None


def _with_agent_environment(kind: str, hyperparameters: dict[str, Any], agent: Agent | None) -> dict[str, Any]:
    """The hyperparameters, with the agent's environment where the kind takes one and they name none.

    Written into the job's own hyperparameters, so the job page and a rerun show where it ran.
    """
    takes = any(item.name == "environment" for item in dataclasses.fields(config_class(kind)))
    if agent is None or not agent.environment or not takes or "environment" in hyperparameters:
        return hyperparameters
    return {**hyperparameters, "environment": agent.environment}


def _check_training_snapshots(snapshot: TaskSetSnapshot, heldout: TaskSetSnapshot | None) -> None:
    # Held-out tasks are never trained on (DESIGN.md): the split is checked here, not trusted to the form.
    if snapshot.split != Split.TRAIN:
        raise LaunchRefused(f"snapshot {snapshot.name!r} is a {snapshot.split} snapshot; train on a train snapshot")
    if snapshot.task_count == 0:
        raise LaunchRefused(f"snapshot {snapshot.name!r} has no tasks")
    if heldout is not None and heldout.split != Split.HELDOUT:
        raise LaunchRefused(f"snapshot {heldout.name!r} is not a held-out snapshot")


def _check_mine_snapshots(
    snapshot: TaskSetSnapshot, heldout: TaskSetSnapshot | None, regression: TaskSetSnapshot | None
) -> None:
    # Mining reads train results only: a held-out task is never sampled, so it can never be chosen for training.
    if snapshot.split != Split.TRAIN:
        raise LaunchRefused(
            f"snapshot {snapshot.name!r} is a {snapshot.split} snapshot; mine a train snapshot "
            "(held-out tasks are never mined)"
        )
    if heldout is not None or regression is not None:
        raise LaunchRefused("a mine job reads its train snapshot only: give no held-out or regression snapshot")
    if snapshot.task_count == 0:
        raise LaunchRefused(f"snapshot {snapshot.name!r} has no tasks")


def job_claim(*, job_id: Any, worker: str) -> Job | None:
    """Take a queued job for this worker (one attempt more); None when it is not queued."""
    now = timezone.now()
    claimed = Job.objects.filter(pk=job_id, state=JobState.QUEUED, cancel_requested=False).update(
        state=JobState.RUNNING, attempts=F("attempts") + 1, heartbeat_at=now, started_at=now, worker=worker,
        updated_at=now,
    )  # fmt: skip
    return Job.objects.get(pk=job_id) if claimed else None


def job_started(*, job: Job, run_dir: str, pid: int) -> None:
    Job.objects.filter(pk=job.pk).update(run_dir=run_dir)
    job.run_dir = run_dir
    _log_append(job, f"attempt {job.attempts} started on {job.worker} (trainer pid {pid})")


def job_not_started(*, job: Job, reason: str) -> Job:
    """End a claimed attempt whose trainer could not start (a full disk, a wrong TRAINER_COMMAND): failed, with why."""
    job_event_store(job=job, event=ErrorEvent(message=reason, kind="not_started"))
    return job_finish(job=job, exit_code=None, stderr_tail="", cancelled=False)


def job_heartbeat(*, job: Job) -> bool:
    """Record that the attempt is alive; whether it must stop: a cancel was requested, or it is no longer current.

    An attempt stops being current when the reaper took its worker for lost (a beat that came too
    late) and requeued the job: its trainer must not race the next attempt's.
    """
    current = Job.objects.filter(pk=job.pk, state=JobState.RUNNING, attempts=job.attempts)
    beat = current.update(heartbeat_at=timezone.now())
    return not beat or Job.objects.filter(pk=job.pk, cancel_requested=True).exists()


_T = TypeVar("_T")


def job_event_store(*, job: Job, event: JobEvent) -> None:
    if isinstance(event, MetricEvent):
        MetricPoint.objects.create(job=job, attempt=job.attempts, step=event.step, name=event.name, value=event.value)
    elif isinstance(event, SampleEvent):
        Sample.objects.create(
            job=job, step=event.step, task_id=storable(event.task_id)[:255], prompt=storable(event.prompt),
            completion=storable(event.completion), reward=event.reward, components=storable(event.components),
            episode=storable(event.episode),
        )  # fmt: skip
    elif isinstance(event, LogEvent | CheckpointEvent):
        line = event.message if isinstance(event, LogEvent) else f"checkpoint at step {event.step}: {event.path}"
        _log_append(job, storable(line))
    elif isinstance(event, DoneEvent):
        Job.objects.filter(pk=job.pk, attempts=job.attempts).update(result=storable(event.to_json()))
    elif isinstance(event, ErrorEvent):
        error = storable(f"{event.kind}: {event.message}")[:5000]
        Job.objects.filter(pk=job.pk, attempts=job.attempts).update(error=error)


def storable(value: _T) -> _T:
    """`value` with every NUL character shown as U+FFFD: PostgreSQL stores no NUL in text or jsonb.

    A model's sampled completion may hold one (a tiny or broken model decodes token 0 as NUL);
    refusing the event would fail the whole attempt over what is only a display string.
    """
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")  # type: ignore[return-value]
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}  # type: ignore[return-value]
    if isinstance(value, list):
        return [storable(item) for item in value]  # type: ignore[return-value]
    return value


def _log_append(job: Job, line: str) -> None:
    with transaction.atomic():
        current = Job.objects.select_for_update().values_list("log_tail", flat=True).get(pk=job.pk)
        lines = (current.splitlines() + [line])[-LOG_TAIL_LINES:]
        Job.objects.filter(pk=job.pk).update(log_tail="\n".join(lines))


@transaction.atomic
def job_finish(*, job: Job, exit_code: int | None, stderr_tail: str, cancelled: bool) -> Job:
    """Close the attempt: succeeded, cancelled or failed by the exit and the events; store an eval's results.

    An attempt the reaper superseded (the job requeued, perhaps running again elsewhere) closes nothing.
    """
    attempt = job.attempts
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.state != JobState.RUNNING or job.attempts != attempt:
        return job
    if cancelled:
        job.state = JobState.CANCELLED
    elif exit_code == 0 and job.result.get("event") == "done":
        job.state = JobState.SUCCEEDED
    else:
        job.state = JobState.FAILED
        job.error = job.error or f"trainer exited with code {exit_code} and no done event"
    job.exit_code, job.finished_at = exit_code, timezone.now()
    if stderr_tail:
        job.log_tail = (job.log_tail + "\n--- stderr ---\n" + storable(stderr_tail)).strip()[-20000:]
    job.save()
    if job.state == JobState.SUCCEEDED and job.kind == JobKind.EVAL:
        _eval_run_store(job)
    if job.state == JobState.SUCCEEDED and job.kind == JobKind.MINE:
        job_mined_snapshot_create(job=job)
    audit_record(actor=None, action=f"job.{job.state}", target=job, data={"exit_code": exit_code})
    job_finished.send(sender=Job, job=job)
    return job


def _eval_run_store(job: Job) -> EvalRun:
    files = job.result.get("files") or {}
    summary = json.loads(Path(files["metrics"]).read_text()) if files.get("metrics") else {}
    results_path = job.result.get("results")
    results = [json.loads(line) for line in Path(results_path).read_text().splitlines()] if results_path else []
    label = job.base_model + (f" + {job.adapter}" if job.adapter else "")
    run, _ = EvalRun.objects.update_or_create(
        job=job,
        defaults={
            "snapshot": job.task_snapshot, "model_label": label, "metrics": job.result.get("metrics") or {},
            "per_bucket": summary.get("by_bucket", {}), "results": results,
            "recommendation": summary.get("recommendation", {}),
        },
    )  # fmt: skip
    return run


@transaction.atomic
def job_mined_snapshot_create(*, job: Job) -> TaskSetSnapshot | None:
    """Freeze the train tasks a succeeded mine job kept as a snapshot, once; None when it kept none.

    The mined file lists the kept tasks by id; the snapshot holds the job's snapshot items with
    those ids (`datasets.services.snapshot_subset_create`). A second call returns the first one's
    snapshot. A mined file that cannot be read leaves the job succeeded, with the reason as its error.
    """
    locked = Job.objects.select_for_update(of=("self",)).select_related("snapshot", "mined_snapshot").get(pk=job.pk)
    if locked.mined_snapshot is not None:
        job.mined_snapshot = locked.mined_snapshot
        return locked.mined_snapshot
    try:
        task_ids = _mined_task_ids(locked)
    except (OSError, ContractError, KeyError, TypeError) as error:
        Job.objects.filter(pk=job.pk).update(error=f"the mined tasks could not be frozen: {error}"[:5000])
        return None
    metrics = locked.result.get("metrics") or {}
    selection = {"mined_by_job": str(locked.id), "model": locked.base_model, "adapter": locked.adapter or None,
                 **{key: metrics.get(key) for key in ("samples", "min_solved", "max_solved")}}  # fmt: skip
    snapshot = snapshot_subset_create(
        actor=locked.launched_by, source=locked.task_snapshot, task_ids=task_ids, selection=selection,
        name=f"{locked.task_snapshot.name}-mined-{str(locked.id)[:8]}",
    )  # fmt: skip
    if snapshot is not None:
        Job.objects.filter(pk=job.pk).update(mined_snapshot=snapshot)
        job.mined_snapshot = snapshot
    return snapshot


def _mined_task_ids(job: Job) -> list[str]:
    path = (job.result.get("files") or {})["mined"]
    return [str(line["id"]) for line in read_json_lines(path)]


@transaction.atomic
def job_cancel(*, actor: Actor, job: Job) -> Job:
    """Ask a job to stop: a queued one is cancelled at once, a running one by its worker (SIGTERM, then SIGKILL)."""
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.state in FINISHED_STATES:
        return job
    job.cancel_requested = True
    if job.state == JobState.QUEUED:
        job.state, job.finished_at = JobState.CANCELLED, timezone.now()
    job.save(update_fields=["cancel_requested", "state", "finished_at", "updated_at"])
    audit_record(actor=actor, action="job.cancel", target=job)
    if job.state == JobState.CANCELLED:  # no worker will finish it: say so here, as `job_finish` does
        job_finished.send(sender=Job, job=job)
    return job


def jobs_reap(*, stale_after: timedelta | None = None) -> list[Job]:
    """Requeue running jobs whose worker went silent (within their attempts), or fail them.

    A requeued job is re-sent after the commit; when the broker refuses, it stays queued and
    undispatched, and `jobs_redispatch` sends it later.
    """
    if stale_after is None:
        stale_after = timedelta(seconds=settings.JOB_HEARTBEAT_STALE_SECONDS)
    limit = timezone.now() - stale_after
    reaped = []
    for job in Job.objects.filter(state=JobState.RUNNING, heartbeat_at__lt=limit):
        if _job_reap(job):
            reaped.append(job)
    return reaped


@transaction.atomic
def _job_reap(job: Job) -> bool:
    """Requeue or end one silent job; False when it beat or finished meanwhile. An ended one sends
    `job_finished`, in this transaction, as `job_finish` does: its gate or replay must not wait for good."""
    retry = job.attempts < job.max_attempts and not job.cancel_requested
    new_state = JobState.QUEUED if retry else (JobState.CANCELLED if job.cancel_requested else JobState.FAILED)
    updated = Job.objects.filter(pk=job.pk, state=JobState.RUNNING, heartbeat_at=job.heartbeat_at).update(
        state=new_state, error="" if retry else f"worker lost after {job.attempts} attempt(s)",
        finished_at=None if retry else timezone.now(), updated_at=timezone.now(), dispatched_at=None,
    )  # fmt: skip
    if not updated:
        return False
    audit_record(actor=None, action="job.requeue" if retry else "job.lost", target=job, data={"attempts": job.attempts})
    if retry:
        transaction.on_commit(lambda: job_dispatch(job_id=job.id), robust=True)
    else:
        job.refresh_from_db()
        job_finished.send(sender=Job, job=job)
    return True
