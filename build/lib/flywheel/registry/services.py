"""Writes of the registry: register versions, launch and record gates and replays, set policies, promote, roll back.

Every change of the live pointer happens under a row lock on the agent, so two approvers at
once (or a double click) are serialized: the second finds the version already live and does
nothing, or finds that the live version changed since its page was drawn (`expected_live`) and
is refused with `PromotionConflict`. Each change is a Deployment row and an audit event.
A replay has a version answer a trajectory's failing step again as a job (`registry.replay`), recorded
when the job finishes. Served chat completions are recorded off the request's path: `served_record_later`
samples (answers the guardrails blocked are always kept), prices the answer, keeps the exchange in an
outbox row and hands its id to a task on the `default` queue, whose `served_store` ingests it;
`served_sweep` re-sends rows whose message may be lost.
The receivers of `training.signals.job_finished` run inside the job's finishing transaction,
in a savepoint, so a registry problem is recorded and never fails the job.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from flywheel.core.models import Agent
from flywheel.core.roles import Perm
from flywheel.core.services import Actor, actor_user, audit_record, outbox_due, outbox_send
from flywheel.datasets.models import Split, TaskSetSnapshot
from flywheel.ingest.models import Trajectory
from flywheel.ingest.services import IngestOptions, redactor_build, served_call_ingest
from flywheel.registry import guardrails, selectors, storage, traffic
from flywheel.registry.models import (
    Deployment,
    DeploymentAction,
    GatePolicy,
    GateResult,
    GateStatus,
    LivePointer,
    ModelVersion,
    Replay,
    ReplayStatus,
    ServedExchange,
)
from flywheel.registry.replay import ReplayUnavailable, replay_input, replay_outcome, usage_of
from flywheel.training.models import TRAINING_KINDS, Job, JobKind, JobState
from trainer.spec.adapters import AdapterError
from trainer.spec.config import SpecError, config_from_json
from trainer.spec.gate import GateConfig, Policy

logger = logging.getLogger(__name__)


class RegistryRefused(ValueError):
    """The request cannot be carried out; the message says why, and nothing was changed."""


class PromotionConflict(RegistryRefused):
    """The live version changed since the caller looked; nothing was changed."""


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def _locked_agent(agent: Agent) -> Agent:
    return Agent.objects.select_for_update().get(pk=agent.pk)


# --- Versions -------------------------------------------------------------------------------


@transaction.atomic
def version_register(
    *,
    actor: Actor,
    agent: Agent,
    adapter_dir: str | Path,
    base_model: str,
    training_job: Job | None = None,
    parent: ModelVersion | None = None,
    config: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    snapshot_hash: str = "",
    heldout_snapshot_hash: str = "",
) -> ModelVersion:
    """The adapter in `adapter_dir`, verified and copied into the registry as the agent's next version."""
    _locked_agent(agent)  # numbers are handed out one at a time per agent
    number = (ModelVersion.objects.filter(agent=agent).order_by("-number").values_list("number", flat=True).first()
              or 0) + 1  # fmt: skip
    try:
        stored = storage.adapter_copy(source=adapter_dir, agent_name=agent.name, number=number)
    except (AdapterError, storage.AdapterStoreError) as error:
        raise RegistryRefused(f"the adapter cannot be registered: {error}") from None
    version = ModelVersion(
        agent=agent, number=number, base_model=base_model, parent=parent, training_job=training_job,
        snapshot_hash=snapshot_hash, heldout_snapshot_hash=heldout_snapshot_hash, config=config or {},
        metrics=metrics or {}, adapter_sha256=stored.sha256, config_sha256=stored.config_sha256,
        storage_path=stored.relative_path, registered_by=actor_user(actor),
    )  # fmt: skip
    version.full_clean()
    version.save()
    audit_record(actor=actor, action="version.register", target=version,
                 data={"sha256": stored.sha256, "job": str(training_job.pk) if training_job else None,
                       "parent": parent.tag if parent else None})  # fmt: skip
    return version


def version_register_from_job(*, job: Job) -> ModelVersion | None:
    """Register a succeeded training job's adapter (sft, dpo, grpo; once: a second call returns the same version)."""
    if job.kind not in TRAINING_KINDS or job.state != JobState.SUCCEEDED:
        return None
    existing = ModelVersion.objects.filter(training_job=job).first()
    if existing is not None:
        return existing
    adapter_dir = ((job.result or {}).get("files") or {}).get("adapter_dir")
    if job.agent is None or not adapter_dir:
        why = "the job has no agent" if job.agent is None else "the done event names no adapter_dir"
        audit_record(actor=None, action="version.register_skipped", target=job, data={"reason": why})
        return None
    return version_register(
        actor=None, agent=job.agent, adapter_dir=adapter_dir, base_model=job.base_model, training_job=job,
        parent=_parent_version(job.agent, job.adapter), config={"kind": job.kind, **job.hyperparameters},
        metrics=(job.result or {}).get("metrics") or {}, snapshot_hash=job.task_snapshot.content_hash,
        heldout_snapshot_hash=job.heldout_snapshot.content_hash if job.heldout_snapshot else "",
    )  # fmt: skip


def _parent_version(agent: Agent, adapter: str) -> ModelVersion | None:
    """The registered version a job started from, found by its adapter's weights hash."""
    if not adapter:
        return None
    try:
        manifest = json.loads((Path(adapter) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return ModelVersion.objects.filter(agent=agent, adapter_sha256=manifest.get("sha256", "")).first()


# --- Gates ----------------------------------------------------------------------------------


@transaction.atomic
def gate_policy_set(*, actor: Actor, agent: Agent, policy: dict[str, Any]) -> GatePolicy:
    """Store the agent's promotion criteria, checked by trainer's own Policy."""
    try:
        checked = config_from_json(Policy, policy, "gate policy")
    except SpecError as error:
        raise RegistryRefused(str(error)) from None
    stored, _ = GatePolicy.objects.update_or_create(
        agent=agent, defaults={"policy": asdict(checked), "updated_by": actor_user(actor)}
    )
    audit_record(actor=actor, action="gate_policy.update", target=agent, data=asdict(checked))
    return stored


@transaction.atomic
def gate_launch(
    *,
    actor: Actor,
    candidate: ModelVersion,
    heldout_snapshot: TaskSetSnapshot,
    regression_snapshot: TaskSetSnapshot | None = None,
    options: dict[str, Any] | None = None,
) -> GateResult:
    """Start a gate job: the candidate against the live version (or the base model when none is live)."""
    from flywheel.training.services import LaunchRefused, job_launch

    if heldout_snapshot.split != Split.HELDOUT:
        raise RegistryRefused(f"snapshot {heldout_snapshot.name!r} is not held-out; a gate evaluates on held-out tasks")
    baseline = selectors.live_version(agent=candidate.agent)
    if baseline == candidate:
        raise RegistryRefused(f"{candidate.tag} is the live version already; there is nothing to compare it with")
    if baseline is not None and baseline.base_model != candidate.base_model:
        baseline = None  # another base: the fair comparison is with the candidate's own base model
    hyperparameters = _gate_hyperparameters(candidate, baseline, options or {})
    try:
        job = job_launch(
            actor=actor, kind=JobKind.GATE, snapshot=heldout_snapshot, base_model=candidate.base_model,
            adapter=str(_verified_folder(candidate)), agent=candidate.agent, hyperparameters=hyperparameters,
            regression_snapshot=regression_snapshot,
        )  # fmt: skip
    except LaunchRefused as error:
        raise RegistryRefused(str(error)) from None
    gate = GateResult(job=job, candidate=candidate, baseline=baseline, policy=asdict(GateConfig(**{
        key: value for key, value in hyperparameters.items() if key != "seed"}).policy))  # fmt: skip
    gate.full_clean()
    gate.save()
    audit_record(actor=actor, action="gate.launch", target=candidate,
                 data={"gate": str(gate.pk), "job": str(job.pk), "baseline": baseline.tag if baseline else None})
    return gate


def _gate_hyperparameters(candidate: ModelVersion, baseline: ModelVersion | None,
                          options: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The agent's policy, then the caller's options, then the baseline: checked by the gate job's config."""
    policy = asdict(selectors.gate_policy(agent=candidate.agent))
    baseline_adapter = str(_verified_folder(baseline)) if baseline else None
    hyperparameters = {**policy, **options, "baseline_adapter": baseline_adapter}
    try:
        config_from_json(GateConfig, {k: v for k, v in hyperparameters.items() if k != "seed"}, "gate hyperparameters")
    except SpecError as error:
        raise RegistryRefused(str(error)) from None
    return hyperparameters


def _verified_folder(version: ModelVersion) -> Path:
    try:
        return selectors.adapter_folder(version=version)
    except storage.AdapterTampered as error:
        raise RegistryRefused(str(error)) from None


def gate_result_store(*, job: Job) -> GateResult | None:
    """Record a finished gate job's decision on its GateResult (once: only a pending one changes)."""
    gate = GateResult.objects.select_for_update().filter(job=job, status=GateStatus.PENDING).first()
    if gate is None:
        return None
    if job.state == JobState.SUCCEEDED:
        _gate_read(gate, job)
    else:
        gate.status, gate.error = GateStatus.ERROR, job.error or f"the gate job ended {job.state}"
    gate.full_clean()
    gate.save()
    audit_record(actor=None, action=f"gate.{gate.status}", target=gate.candidate,
                 data={"gate": str(gate.pk), "summary": gate.decision.get("summary", gate.error)})
    return gate


def _gate_read(gate: GateResult, job: Job) -> None:
    path = ((job.result or {}).get("files") or {}).get("gate")
    try:
        report = json.loads(Path(path).read_text()) if path else None
    except (OSError, ValueError) as error:
        report, gate.error = None, f"gate.json cannot be read: {error}"
    if not report or "decision" not in report:
        gate.status, gate.error = GateStatus.ERROR, gate.error or "the gate job wrote no decision"
        return
    gate.decision = report.pop("decision")
    gate.report = {key: report.get(key) for key in ("candidate", "baseline", "tasks", "snapshot_sha256",
                                                   "regression_sha256", "config", "measurement")}  # fmt: skip
    gate.status = GateStatus.PASSED if gate.decision.get("passed") else GateStatus.FAILED


def on_job_finished(sender: object, job: Job, **kwargs: Any) -> None:
    """`job_finished` receiver: register trained adapters, record gate decisions and replays; never fail the job."""
    try:
        with transaction.atomic():
            if job.kind in TRAINING_KINDS:
                version_register_from_job(job=job)
            elif job.kind == JobKind.GATE:
                gate_result_store(job=job)
            elif job.kind == JobKind.REPLAY:
                replay_result_store(job=job)
    except (RegistryRefused, storage.AdapterTampered, ValidationError, OSError) as error:
        logger.warning("registry: job %s: %s", job.pk, error)
        audit_record(actor=None, action="registry.job_failed", target=job, data={"error": str(error)[:1000]})


# --- Replays of failing steps (flywheel.registry.replay) -----------------------------------


@transaction.atomic
def replay_launch(
    *,
    actor: Actor,
    trajectory: Trajectory,
    version: ModelVersion,
    step_index: int | None = None,
    options: dict[str, Any] | None = None,
) -> Replay:
    """Have `version` answer the trajectory's failing step (or `step_index`) again, as a `replay` job.

    For trainers and approvers. Returns the replay of the same version and step that is running
    or answered, when there is one (a double click, or a second look): greedy decoding would answer
    the same. `options` are the job's hyperparameters (`trainer.spec.replay.ReplayConfig`).
    """
    from flywheel.training.services import LaunchRefused, job_launch

    if not selectors.can_replay(actor_user(actor)):
        raise PermissionDenied("replaying needs the trainer's or the approver's permission")
    if version.agent_id != trajectory.agent_id:
        raise RegistryRefused(f"{version.tag} is not a version of {trajectory.agent.name}")
    # One launch at a time per trajectory: the second of two sees the first's replay.
    Trajectory.objects.select_for_update().filter(pk=trajectory.pk).first()
    try:
        prepared = replay_input(trajectory=trajectory, step_index=step_index)
    except ReplayUnavailable as error:
        raise RegistryRefused(str(error)) from None
    existing = _replay_standing(trajectory, version, prepared.step_index)
    if existing is not None:
        return existing
    try:
        job = job_launch(
            actor=actor, kind=JobKind.REPLAY, snapshot=None, base_model=version.base_model,
            adapter=str(_verified_folder(version)), agent=trajectory.agent, hyperparameters=options or {},
            cases=[prepared.case],
        )  # fmt: skip
    except LaunchRefused as error:
        raise RegistryRefused(str(error)) from None
    replay = Replay(
        trajectory=trajectory, version=version, job=job, step_index=prepared.step_index,
        was_live=selectors.live_version(agent=version.agent) == version, expected_source=prepared.expected_source,
        launched_by=actor_user(actor),
    )  # fmt: skip
    replay.full_clean()
    replay.save()
    audit_record(actor=actor, action="replay.launch", target=replay,
                 data={"trajectory": str(trajectory.pk), "version": version.tag, "step": prepared.step_index,
                       "job": str(job.pk)})  # fmt: skip
    return replay


def _replay_standing(trajectory: Trajectory, version: ModelVersion, step_index: int) -> Replay | None:
    """The replay of this version and step that is running or answered; one whose job ended unrecorded is closed."""
    replay = (Replay.objects.select_related("job").exclude(status=ReplayStatus.ERROR)
              .filter(trajectory=trajectory, version=version, step_index=step_index).first())  # fmt: skip
    if replay is not None and replay.status == ReplayStatus.PENDING and replay.job.is_finished:
        # Every end of a job sends `job_finished`, but its receiver may have been refused (logged and audited),
        # or the job ended before the reaper and the cancel of a queued job sent it: close the replay now.
        replay = replay_result_store(job=replay.job) or replay
    return None if replay is None or replay.status == ReplayStatus.ERROR else replay


@transaction.atomic
def replay_result_store(*, job: Job) -> Replay | None:
    """Record a finished replay job's answer and scores on its Replay (once: only a pending one changes)."""
    replay = Replay.objects.select_for_update().filter(job=job, status=ReplayStatus.PENDING).first()
    if replay is None:
        return None
    if job.state != JobState.SUCCEEDED:
        replay.status, replay.error = ReplayStatus.ERROR, job.error or f"the replay job ended {job.state}"
    else:
        try:
            line = replay_outcome(job=job)
        except ReplayUnavailable as error:
            replay.status, replay.error = ReplayStatus.ERROR, str(error)
        else:
            replay.status, replay.answer, replay.usage = ReplayStatus.DONE, str(line.get("output", "")), usage_of(line)
            replay.scores, replay.original_scores = line["scores"], line.get("original_scores")
    replay.full_clean()
    replay.save()
    audit_record(actor=None, action=f"replay.{replay.status}", target=replay,
                 data={"job": str(job.pk), "error": replay.error[:500]})  # fmt: skip
    return replay


# --- Promote and roll back ------------------------------------------------------------------


def _require_approver(actor: Actor) -> None:
    user = actor_user(actor)
    if user is None or not user.has_perm(Perm.APPROVE_VERSIONS):
        raise PermissionDenied(f"permission {Perm.APPROVE_VERSIONS} required")


def _check_expected(current: ModelVersion | None, expected_live: Any) -> None:
    if expected_live is not UNSET and expected_live != current:
        now = current.tag if current else "nothing"
        raise PromotionConflict(f"the live version changed meanwhile (it is {now} now); look again and decide")


@transaction.atomic
def version_promote(
    *, actor: Actor, version: ModelVersion, reason: str = "", expected_live: Any = UNSET
) -> Deployment | None:
    """Make `version` live: with a passed gate against the live version, or with a written override reason.

    None when it is live already (a double click). `expected_live` is the live version the caller
    saw (None for none); when it has changed since, PromotionConflict.
    """
    _require_approver(actor)
    agent = _locked_agent(version.agent)
    current = selectors.live_version(agent=agent)
    if current == version:
        return None
    _check_expected(current, expected_live)
    _verified_folder(version)
    gate = selectors.gate_for_promotion(version=version, baseline=current)
    override = gate is None or not gate.passed
    if override and not reason.strip():
        raise RegistryRefused(_why_override(version, current, gate))
    return _deploy(actor, agent, DeploymentAction.PROMOTE, current, version, reason, gate, override)


def _why_override(version: ModelVersion, current: ModelVersion | None, gate: GateResult | None) -> str:
    against = current.tag if current else "the base model"
    if gate is None:
        return f"{version.tag} has no finished gate against {against}; promoting it needs a written override reason"
    return f"{version.tag} failed its gate against {against} ({gate.decision.get('summary', '')}); " \
           "promoting it needs a written override reason"


@transaction.atomic
def version_rollback(
    *, actor: Actor, agent: Agent, reason: str, to_version: ModelVersion | None = None, expected_live: Any = UNSET
) -> Deployment | None:
    """Put an earlier version live again (by default the newest earlier one that was live); a reason is required.

    None when `to_version` is live already (a double click).
    """
    _require_approver(actor)
    if not reason.strip():
        raise RegistryRefused("a rollback needs a written reason")
    agent = _locked_agent(agent)
    current = selectors.live_version(agent=agent)
    if current is None:
        raise RegistryRefused(f"{agent.name} has no live version to roll back from")
    if to_version is not None and to_version == current:
        return None
    _check_expected(current, expected_live)
    target = to_version or selectors.previous_version(agent=agent, current=current)
    if target is None:
        raise RegistryRefused(f"{current.tag} has no earlier version to roll back to")
    if target.agent_id != agent.pk or target.number >= current.number:
        raise RegistryRefused(f"roll back to an earlier version of {agent.name} than {current.tag}")
    _verified_folder(target)
    return _deploy(actor, agent, DeploymentAction.ROLLBACK, current, target, reason, None, False)


def _deploy(
    actor: Actor, agent: Agent, action: str, current: ModelVersion | None, target: ModelVersion, reason: str,
    gate: GateResult | None, override: bool,
) -> Deployment:
    user = actor_user(actor)
    deployment = Deployment(
        agent=agent, action=action, from_version=current, to_version=target, to_sha256=target.adapter_sha256,
        actor=user, actor_name=user.get_username() if user else "system", reason=reason.strip(), override=override,
        gate_result=gate,
    )  # fmt: skip
    deployment.full_clean()
    deployment.save()
    LivePointer.objects.update_or_create(agent=agent, defaults={"version": target, "deployment": deployment})
    audit_record(actor=actor, action=f"version.{action}", target=target, data={
        "agent": agent.name, "from": current.tag if current else None, "to": target.tag,
        "from_sha256": current.adapter_sha256 if current else None, "to_sha256": target.adapter_sha256,
        "reason": deployment.reason, "override": override, "gate": str(gate.pk) if gate else None,
        "gate_passed": gate.passed if gate else None, "deployment": str(deployment.pk),
    })  # fmt: skip
    return deployment


# --- served traffic -------------------------------------------------------------------------


def served_sampled(*, agent: Agent) -> bool:
    """Whether this answer of `agent` is to be recorded: its switch, then its sample rate."""
    return agent.record_served and random.random() < agent.served_sample_rate  # noqa: S311 - sampling, not secrets


def served_record_later(*, version: ModelVersion, body: dict[str, Any], answer: dict[str, Any], started: float,
                        verdict: guardrails.Verdict | None = None, finished: float | None = None) -> bool:  # fmt: skip
    """Keep one answered exchange for the recording task, when the agent's setting samples it; never raises.

    `answer` is what the server answered, before the guardrails; `verdict` is theirs. An answer
    whose calls were blocked is kept whatever the sample rate (while recording is on): it is
    what triage must see, and rare; its record says `outside_sample` when the draw left it out,
    so rates over sampled traffic can leave it aside. Its cost is the agent's prices times the
    usage the answer reports.

    Called once the answer has gone out (after a whole answer's body, or a stream's last chunk),
    on the worker thread that served it; the duration is `started` to `finished` (time.monotonic(),
    now when not given). The outbox row is committed first, so a broker that refuses the message
    leaves it to the sweeper; a failure to write the row costs this record only, logged, never the
    answer.
    """
    try:
        agent = version.agent
        sampled = served_sampled(agent=agent)
        blocked = verdict is not None and verdict.of(0).outcome == guardrails.BLOCKED
        if not sampled and not (blocked and agent.record_served):
            return False
        duration_ms = round(1000 * ((finished or time.monotonic()) - started))
        record = traffic.served_record(
            served=traffic.Served(tag=version.tag, adapter_sha256=version.adapter_sha256), body=body, answer=answer,
            duration_ms=duration_ms, exchange_id=f"served-{uuid.uuid4().hex}",
            verdict=verdict, prices=traffic.Prices(agent.price_input_per_million, agent.price_output_per_million),
        )  # fmt: skip
        if not sampled:
            record["metadata"]["served"]["outside_sample"] = True
        exchange = ServedExchange.objects.create(agent=version.agent, record=record)
    except Exception:  # the database, or a record we failed to build: the client has its answer regardless
        logger.warning("a served answer of %s was not recorded", version.tag, exc_info=True)
        return False
    return served_dispatch(exchange_id=exchange.pk)


def served_dispatch(*, exchange_id: uuid.UUID) -> bool:
    """Hand the exchange's message to the broker and mark it dispatched; False (logged) when the broker refused."""
    from flywheel.registry.tasks import record_served

    return outbox_send(send=record_served.delay, model=ServedExchange, row_id=exchange_id)


def served_store(*, exchange_id: uuid.UUID | str) -> str:
    """Store a kept exchange as a trajectory of its agent through the ingest path, redacted as ingest is; drop the row.

    Its status: stored, duplicate, rejected (logged), or `gone` when an earlier delivery stored it.
    The record's id (the answer's id) is the dedup key in the `served` source, so a second delivery
    racing the first stores nothing twice; and a trace of the same call that the client exported
    over OTLP is the same trajectory (`ingest.services.served_call_ingest`), whichever came first.
    """
    exchange = ServedExchange.objects.select_related("agent").filter(pk=exchange_id).first()
    if exchange is None:
        return "gone"
    agent = exchange.agent
    options = IngestOptions(format=traffic.FORMAT, agent=agent.name, source=traffic.SOURCE,
                            redactor=redactor_build(patterns=settings.INGEST_REDACT_DEFAULT, custom=[]))  # fmt: skip
    with transaction.atomic():
        result = served_call_ingest(record={**exchange.record, "agent": agent.name}, options=options)
        ServedExchange.objects.filter(pk=exchange.pk).delete()
    if result.status == "rejected":
        logger.warning("a served answer of %s could not be stored: %s", agent.name, result.reason)
    return result.status


def served_sweep(*, resend_after: timedelta | None = None, grace: timedelta | None = None) -> list[uuid.UUID]:
    """Re-send exchanges whose message may be lost: never sent once `grace` has passed, or sent `resend_after` ago."""
    waiting = ServedExchange.objects.filter(outbox_due(since="created_at", resend_after=resend_after, grace=grace))
    ids = list(waiting.order_by("created_at").values_list("pk", flat=True)[: settings.DISPATCH_SWEEP_LIMIT])
    return [pk for pk in ids if served_dispatch(exchange_id=pk)]
