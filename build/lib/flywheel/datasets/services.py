"""Writes of the datasets app: tasks (with the leakage rule), imports, edits, split moves, preference pairs,
snapshots of tasks and of pairs, batches of synthetic variants (generated, screened, accepted into train).

The leakage rule: a task's leakage key (its normalised prompt, or its source's template where it
has one) may sit in one split only. A task clashing with the other split is refused, naming the
clashing task; one repeating a key of its own split is stored and flagged as a duplicate. Once a
job has used a held-out snapshot, its tasks can never move to train. Preference pairs share the
rule: a pair's prompt key sits in the split its tasks and pairs sit in.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings as django_settings
from django.db import connection, transaction
from django.utils import timezone

from flywheel.core.models import Agent
from flywheel.core.services import Actor, actor_user, audit_record, outbox_due, outbox_send
from flywheel.datasets.conversion import conversation_before, intervention_turns, turn_message
from flywheel.datasets.importers import Candidate
from flywheel.datasets.models import (
    BatchState,
    PairSnapshotItem,
    PairSource,
    PreferencePair,
    RegressionTask,
    SnapshotItem,
    SnapshotKind,
    SourceKind,
    Split,
    SyntheticBatch,
    SyntheticCandidate,
    TaskRevision,
    TaskSetSnapshot,
)
from flywheel.datasets.pairs import pair_line, text_message, trl_message
from flywheel.datasets.validation import task_problems
from flywheel.ingest.models import Step, Trajectory
from flywheel.triage.selectors import agent_policy_json
from trainer.contracts import ContractError, Task
from trainer.environments import environment_names, make_environment
from trainer.environments.workbench import WorkbenchDataMissing
from trainer.spec.synthetic import (
    DEFAULT_THRESHOLD,
    FILTERS,
    HELDOUT_THRESHOLD,
    METHODS,
    NO_ENVIRONMENT,
    EnvironmentFilter,
    Options,
    Screened,
    counts,
    generate,
    normalised_prompt,
    screen,
)
from trainer.spec.tasks import stratified_sample
from trainer.verifiers import DEFAULT_VERIFIER, get_verifier, verifier_names
from trainer.verifiers.safety import SafetyPolicy

ERRORS_KEPT = 100
logger = logging.getLogger(__name__)


class TaskRefused(ValueError):
    """The task breaks a rule (leakage, schema, a used held-out snapshot); the message says which."""


def _canonical_hash(value: Any) -> str:
    return hashlib.sha256(
        json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    ).hexdigest()


def task_content(task: Task) -> dict[str, Any]:
    """What a task's hash covers: everything the model sees and the verifier checks, not where it is filed."""
    content = task.to_json()
    content.pop("metadata", None)
    return content


def leakage_text(task: Task, template: str = "") -> str:
    if template:
        return "template: " + " ".join(template.lower().split())
    return prompt_leakage_text(task.messages)


def prompt_leakage_text(messages: list[dict[str, Any]]) -> str:
    """The normalised user turns of a conversation: what the leakage rule compares (and the synthetic
    variants' near-duplicate check shingles)."""
    return "prompt: " + normalised_prompt(messages)


def _pair_clash(key: str, split: str) -> PreferencePair | None:
    """A preference pair of the other split with the same prompt key."""
    return PreferencePair.objects.filter(leakage_key=key).exclude(split=split).first()


def _lock_leakage_key(key: str) -> None:
    # Two imports of the same prompt into different splits must not both pass the check.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [int(key[:15], 16)])


@dataclass(frozen=True)
class TaskOrigin:
    source_kind: str
    source_ref: str = ""
    template: str = ""
    category: str = ""
    environment: str = "single_step"
    source_trajectory_id: Any = None
    bucket_id: int | None = None


@transaction.atomic
def task_create(*, actor: Actor, task: Task, split: str, agent: Agent | None, origin: TaskOrigin) -> RegressionTask:
    """Validate and store one task; raises TaskRefused with the reason.

    Tasks written in the app must fit their schemas exactly; imported ones are flagged instead
    when a value does not (see `validation`).
    """
    if split not in Split.values:
        raise TaskRefused(f"split must be train or heldout, not {split!r}")
    problems = task_problems(task)
    refusals = problems.refusals(strict=origin.source_kind != SourceKind.FILE)
    if refusals:
        raise TaskRefused("; ".join(refusals))
    text = leakage_text(task, origin.template)
    key = hashlib.sha256(text.encode()).hexdigest()
    _lock_leakage_key(key)
    clash = RegressionTask.objects.filter(leakage_key=key).exclude(split=split).first()
    if clash is not None:
        raise TaskRefused(
            f"leaks into {clash.get_split_display()}: same {text.split(':')[0]} as task {clash.external_id}"
        )
    if (pair := _pair_clash(key, split)) is not None:
        raise TaskRefused(f"leaks into {pair.get_split_display()}: same prompt as preference pair {pair.pk}")
    content = task_content(task)
    row = RegressionTask(
        agent=agent, external_id=task.id[:255], split=split, environment=origin.environment,
        source_kind=origin.source_kind, source_ref=origin.source_ref[:500], category=origin.category[:100],
        source_trajectory_id=origin.source_trajectory_id, bucket_id=origin.bucket_id,
        content=content, content_hash=_canonical_hash(content), leakage_key=key, leakage_text=text,
        duplicate_of=RegressionTask.objects.filter(leakage_key=key, split=split).first(), warnings=problems.values,
    )  # fmt: skip
    row.full_clean()
    row.save()
    TaskRevision.objects.create(
        task=row, number=1, content=content, split=split, author=actor_user(actor), note="created"
    )
    return row


@dataclass
class ImportReport:
    imported: int = 0
    refused: int = 0
    rejected: int = 0
    flagged: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)

    def note(self, line: int, reason: str) -> None:
        if len(self.errors) < ERRORS_KEPT:
            self.errors.append({"line": line, "reason": reason})

    def as_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in ("imported", "refused", "rejected", "flagged", "errors")}


def tasks_import(
    *, actor: Actor, candidates: Iterable[Candidate], split: str, agent: Agent | None, source_ref: str
) -> ImportReport:
    """Store every valid candidate; a bad record is `rejected`, a rule-breaking one `refused`."""
    report = ImportReport()
    for candidate in candidates:
        if candidate.task is None:
            report.rejected += 1
            report.note(candidate.line, candidate.error)
            continue
        origin = TaskOrigin(
            source_kind="file", source_ref=f"{source_ref}:{candidate.line}", template=candidate.template,
            category=candidate.category, environment=candidate.environment,
        )  # fmt: skip
        try:
            stored = task_create(actor=actor, task=candidate.task, split=split, agent=agent, origin=origin)
        except TaskRefused as exc:
            report.refused += 1
            report.note(candidate.line, f"{candidate.task.id}: {exc}")
            continue
        report.imported += 1
        if stored.duplicate_of_id is not None or stored.warnings:
            report.flagged += 1
            reasons = [f"duplicate of {stored.duplicate_of.external_id}"] if stored.duplicate_of else []
            report.note(candidate.line, f"{stored.external_id} flagged: {'; '.join(reasons + stored.warnings)}")
    audit_record(actor=actor, action="tasks.import", data={"source": source_ref, "split": split, **report.as_dict()})
    return report


def _used_heldout(task: RegressionTask) -> TaskSetSnapshot | None:
    return TaskSetSnapshot.objects.filter(
        items__task=task, split=Split.HELDOUT, used_at__isnull=False
    ).first()  # fmt: skip


@transaction.atomic
def task_update(*, actor: Actor, task: RegressionTask, new: Task, split: str, note: str = "") -> RegressionTask:
    """Save an edit as a new revision, under the same rules as a new task."""
    task = RegressionTask.objects.select_for_update().get(pk=task.pk)
    if split != task.split and task.split == Split.HELDOUT and (used := _used_heldout(task)) is not None:
        raise TaskRefused(f"task {task.external_id} was evaluated in held-out snapshot {used}; it stays held-out")
    refusals = task_problems(new).refusals(strict=True)
    if refusals:
        raise TaskRefused("; ".join(refusals))
    # A template-keyed task keeps its key: the template it came from does not change with an edit.
    text = task.leakage_text if task.leakage_text.startswith("template: ") else leakage_text(new)
    key = hashlib.sha256(text.encode()).hexdigest()
    _lock_leakage_key(key)
    clash = RegressionTask.objects.filter(leakage_key=key).exclude(split=split).exclude(pk=task.pk).first()
    if clash is not None:
        raise TaskRefused(f"leaks into {clash.get_split_display()}: same prompt as task {clash.external_id}")
    if (pair := _pair_clash(key, split)) is not None:
        raise TaskRefused(f"leaks into {pair.get_split_display()}: same prompt as preference pair {pair.pk}")
    content = task_content(new)
    task.content, task.content_hash, task.split = content, _canonical_hash(content), split
    task.leakage_key, task.leakage_text, task.revision = key, text, task.revision + 1
    task.full_clean()
    task.save()
    TaskRevision.objects.create(
        task=task, number=task.revision, content=content, split=split, author=actor_user(actor), note=note
    )
    audit_record(actor=actor, action="task.update", target=task, data={"revision": task.revision, "split": split})
    return task


# --- preference pairs ----------------------------------------------------------------------


class PairRefused(ValueError):
    """The pair breaks a rule (leakage, chosen equal to rejected); the message says which."""


@dataclass(frozen=True)
class PairDraft:
    """A pair before it is stored: messages in `pairs.trl_message`'s shape, and where it came from."""

    agent: Agent
    prompt: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    chosen: list[dict[str, Any]]
    rejected: list[dict[str, Any]]
    source: str
    trajectory: Trajectory | None
    step_index: int
    correction_id: int | None = None


def _key_split(key: str) -> str | None:
    """The split that tasks or pairs with this prompt key already sit in; None where none does."""
    task = RegressionTask.objects.filter(leakage_key=key).values_list("split", flat=True).first()
    return task or PreferencePair.objects.filter(leakage_key=key).values_list("split", flat=True).first()


@transaction.atomic
def pair_create(*, actor: Actor, draft: PairDraft, split: str | None = None) -> PreferencePair:
    """Store a preference pair; raises PairRefused with the reason.

    `split` None: the split its prompt's tasks and pairs sit in, else train. A split naming the
    other one than theirs is refused, as a task's would be.
    """
    if split is not None and split not in Split.values:
        raise PairRefused(f"split must be train or heldout, not {split!r}")
    if draft.chosen == draft.rejected:
        raise PairRefused("the chosen answer is the rejected one: there is nothing to prefer")
    text = prompt_leakage_text(draft.prompt)
    key = hashlib.sha256(text.encode()).hexdigest()
    _lock_leakage_key(key)
    taken = _key_split(key)
    if split is not None and taken is not None and taken != split:
        raise PairRefused(f"leaks into {Split(taken).label}: its prompt is already there; use that split")
    pair = PreferencePair(
        agent=draft.agent, prompt=draft.prompt, tools=draft.tools, chosen=draft.chosen, rejected=draft.rejected,
        source=draft.source, correction_id=draft.correction_id, trajectory=draft.trajectory,
        step_index=draft.step_index, split=split or taken or Split.TRAIN, leakage_key=key, leakage_text=text,
        created_by=actor_user(actor),
    )  # fmt: skip
    pair.content_hash = _canonical_hash({key: value for key, value in pair_line(pair).items() if key != "id"})
    pair.full_clean()
    pair.save()
    audit_record(actor=actor, action="pair.create", target=pair,
                 data={"source": pair.source, "split": pair.split, "step": pair.step_index})  # fmt: skip
    return pair


def _human_message(step: Step) -> dict[str, Any]:
    """What the human said, as the assistant message it stands for (ingest records an intervention's text only)."""
    return text_message(step.text)


@transaction.atomic
def intervention_pairs_create(*, actor: Actor, trajectory: Trajectory) -> list[PreferencePair]:
    """A pair for each human intervention of the trajectory not yet paired (chosen: the human's step;
    rejected: the agent's turn before it). Safe to run twice: an intervention yields one pair."""
    steps = list(trajectory.steps.order_by("index"))
    done = set(PreferencePair.objects.filter(trajectory=trajectory, source=PairSource.HUMAN_INTERVENTION)
               .values_list("step_index", flat=True))  # fmt: skip
    created = []
    for human, turn in intervention_turns(steps):
        rejected = trl_message(turn_message(turn))
        if human.index in done or _human_message(human) == rejected:
            continue
        draft = PairDraft(
            agent=trajectory.agent, prompt=[trl_message(m) for m in conversation_before(steps, turn[0].index)],
            tools=list(trajectory.agent.tools), chosen=[_human_message(human)], rejected=[rejected],
            source=PairSource.HUMAN_INTERVENTION, trajectory=trajectory, step_index=human.index,
        )  # fmt: skip
        created.append(pair_create(actor=actor, draft=draft))
    return created


@transaction.atomic
def pair_snapshot_create(*, actor: Actor, name: str, split: str, agent: Agent) -> TaskSetSnapshot:
    """Freeze an agent's pairs of a split, as their lines are now; the same pairs give the same snapshot."""
    pairs = list(PreferencePair.objects.filter(agent=agent, split=split).order_by("created_at", "id"))
    if not pairs:
        raise PairRefused(f"no {split} preference pairs of {agent.name} to snapshot")
    content_hash = _canonical_hash(["pairs", *[pair.content_hash for pair in pairs]])
    existing = TaskSetSnapshot.objects.filter(content_hash=content_hash).first()
    if existing is not None:
        return existing
    selection = {"split": split, "agent": agent.name, "kind": SnapshotKind.PAIRS}
    snapshot = TaskSetSnapshot.objects.create(
        name=name, kind=SnapshotKind.PAIRS, split=split, agent=agent, content_hash=content_hash,
        task_count=len(pairs), selection=selection, created_by=actor_user(actor),
    )  # fmt: skip
    PairSnapshotItem.objects.bulk_create(
        PairSnapshotItem(snapshot=snapshot, pair=pair, position=position, content=pair_line(pair),
                         content_hash=pair.content_hash)
        for position, pair in enumerate(pairs)
    )  # fmt: skip
    audit_record(actor=actor, action="snapshot.create", target=snapshot, data={"pairs": len(pairs), **selection})
    return snapshot


# --- snapshots -----------------------------------------------------------------------------


@transaction.atomic
def snapshot_create(
    *,
    actor: Actor,
    name: str,
    split: str,
    agent: Agent | None = None,
    sample_size: int | None = None,
    stratify_by: str = "",
    seed: int = 0,
) -> TaskSetSnapshot:
    """Freeze the tasks of a split (optionally a stratified sample) as they are now; same tasks, same hash."""
    if stratify_by not in ("", "bucket_id", "category"):
        raise TaskRefused("stratify_by must be bucket_id or category")
    tasks = list(
        RegressionTask.objects.filter(split=split, **({"agent": agent} if agent else {})).order_by("external_id")
    )
    if sample_size is not None and sample_size < len(tasks):
        stratum = stratify_by or "category"
        tasks = stratified_sample(tasks, sample_size, seed, lambda task: str(getattr(task, stratum) or ""))
    if not tasks:
        raise TaskRefused(f"no {split} tasks to snapshot")
    selection = {"split": split, "agent": agent.name if agent else None, "sample_size": sample_size,
                 "stratify_by": stratify_by or None, "seed": seed}  # fmt: skip
    content_hash = _canonical_hash([task.content_hash for task in tasks])
    existing = TaskSetSnapshot.objects.filter(content_hash=content_hash).first()
    if existing is not None:
        return existing
    snapshot = TaskSetSnapshot.objects.create(
        name=name, split=split, agent=agent, content_hash=content_hash, task_count=len(tasks),
        selection=selection, created_by=actor_user(actor),
    )  # fmt: skip
    SnapshotItem.objects.bulk_create(
        SnapshotItem(snapshot=snapshot, task=task, position=position, content=task.content,
                     content_hash=task.content_hash, bucket=task.bucket.slug if task.bucket else "",
                     category=task.category)
        for position, task in enumerate(tasks)
    )  # fmt: skip
    audit_record(actor=actor, action="snapshot.create", target=snapshot, data={"tasks": len(tasks), **selection})
    return snapshot


@transaction.atomic
def snapshot_subset_create(
    *, actor: Actor, source: TaskSetSnapshot, task_ids: Iterable[str], name: str, selection: dict[str, Any]
) -> TaskSetSnapshot | None:
    """Freeze the tasks of `source` whose task id is in `task_ids` as a snapshot of its split; None for none.

    The tasks keep the content and order they had in `source` (what a job that chose them ran on);
    one that has moved to the other split since is left out, so a train subset never holds a task
    that is held-out now. Same tasks, same hash: an existing snapshot of them is returned instead.
    """
    wanted = set(task_ids)
    items = [item for item in source.items.select_related("task").order_by("position")
             if item.content.get("id") in wanted and item.task.split == source.split]  # fmt: skip
    if not items:
        return None
    content_hash = _canonical_hash([item.content_hash for item in items])
    existing = TaskSetSnapshot.objects.filter(content_hash=content_hash).first()
    if existing is not None:
        return existing
    snapshot = TaskSetSnapshot.objects.create(
        name=name[:200], split=source.split, agent=source.agent, content_hash=content_hash, task_count=len(items),
        selection={**selection, "from_snapshot": source.content_hash}, created_by=actor_user(actor),
    )  # fmt: skip
    SnapshotItem.objects.bulk_create(
        SnapshotItem(snapshot=snapshot, task=item.task, position=position, content=item.content,
                     content_hash=item.content_hash, bucket=item.bucket, category=item.category)
        for position, item in enumerate(items)
    )  # fmt: skip
    audit_record(actor=actor, action="snapshot.create", target=snapshot, data={"tasks": len(items), **selection})
    return snapshot


def snapshot_mark_used(*, snapshot: TaskSetSnapshot) -> None:
    """Called when a job starts on the snapshot: from then on its held-out tasks stay held-out."""
    TaskSetSnapshot.objects.filter(pk=snapshot.pk, used_at__isnull=True).update(used_at=timezone.now())


# --- synthetic batches ---------------------------------------------------------------------


class BatchRefused(ValueError):
    """The batch cannot be made or accepted as asked; the message says why."""


REJECTED_AT_ACCEPT = "leakage_at_accept"
"""The filter name of a variant the leakage rule refused when the batch was accepted (a held-out task
with its prompt arrived after the batch was screened)."""


@dataclass(frozen=True)
class BatchSettings:
    """How to generate a batch (see `trainer.spec.synthetic.Options`) and the verifier that screens it."""

    methods: tuple[str, ...] = METHODS
    per_method: int = 2
    seed: int = 0
    verifier: str = DEFAULT_VERIFIER
    threshold: float = DEFAULT_THRESHOLD
    heldout_threshold: float = HELDOUT_THRESHOLD

    def options(self, catalogue: Iterable[dict[str, Any]] = ()) -> Options:
        return Options(methods=self.methods, per_method=self.per_method, seed=self.seed, catalogue=tuple(catalogue),
                       threshold=self.threshold, heldout_threshold=self.heldout_threshold)  # fmt: skip


def _seed_rows(agent: Agent) -> list[RegressionTask]:
    """The agent's train tasks that seed variants: not synthetic ones (no variants of variants)."""
    return list(RegressionTask.objects.filter(agent=agent, split=Split.TRAIN)
                .exclude(source_kind=SourceKind.SYNTHETIC).order_by("external_id"))  # fmt: skip


@transaction.atomic
def synthetic_batch_create(*, actor: Actor, agent: Agent, settings: BatchSettings) -> SyntheticBatch:
    """Queue a batch of variants of the agent's train tasks; generated and screened by a task on `default`."""
    try:
        settings.options()
    except ValueError as exc:
        raise BatchRefused(str(exc)) from exc
    if settings.verifier not in verifier_names():
        raise BatchRefused(f"unknown verifier {settings.verifier!r}; known: {', '.join(verifier_names())}")
    if not _seed_rows(agent):
        raise BatchRefused(f"{agent.name} has no train tasks to vary")
    batch = SyntheticBatch(
        agent=agent, methods=list(settings.methods), per_method=settings.per_method, seed=settings.seed,
        verifier=settings.verifier, environment=agent.environment, threshold=settings.threshold,
        heldout_threshold=settings.heldout_threshold, created_by=actor_user(actor),
    )  # fmt: skip
    batch.full_clean()
    batch.save()
    audit_record(actor=actor, action="synthetic.create", target=batch, data={"methods": batch.methods})
    transaction.on_commit(lambda: synthetic_batch_dispatch(batch_id=batch.pk), robust=True)
    return batch


def synthetic_batch_dispatch(*, batch_id: Any) -> bool:
    """Hand the batch's generate message to the broker and mark it dispatched; False (logged) when refused."""
    from flywheel.datasets.tasks import generate_synthetic_batch

    return outbox_send(send=generate_synthetic_batch.delay, model=SyntheticBatch, row_id=batch_id)


def synthetic_batches_sweep(*, resend_after: timedelta | None = None, grace: timedelta | None = None) -> list[Any]:
    """Re-send queued batches whose message may be lost (never sent, or sent long ago and still queued); the ids
    sent. A duplicate message is harmless: generation locks the batch and skips one that is no longer queued."""
    due = outbox_due(since="created_at", resend_after=resend_after, grace=grace)
    waiting = SyntheticBatch.objects.filter(due, state=BatchState.QUEUED).order_by("created_at")
    ids = list(waiting.values_list("pk", flat=True)[: django_settings.DISPATCH_SWEEP_LIMIT])
    return [pk for pk in ids if synthetic_batch_dispatch(batch_id=pk)]


def _batch_settings(batch: SyntheticBatch) -> BatchSettings:
    return BatchSettings(methods=tuple(batch.methods), per_method=batch.per_method, seed=batch.seed,
                         verifier=batch.verifier, threshold=batch.threshold,
                         heldout_threshold=batch.heldout_threshold)  # fmt: skip


def _strict_problems(task: Task) -> list[str]:
    # What `task_create` refuses for a task not imported from a file: the filter applies it up front.
    return task_problems(task).refusals(strict=True)


def _agent_tasks(agent: Agent, split: str) -> list[Task]:
    contents = RegressionTask.objects.filter(agent=agent, split=split).values_list("content", flat=True)
    return [Task.from_json(content) for content in contents]


TEAM_ENVIRONMENT_SKIPPED = "a team's environment runs its code in jobs only, never in the app's workers"


def _environment_filter(batch: SyntheticBatch, policy: SafetyPolicy | None) -> EnvironmentFilter:
    """Where the batch's variants are played: the agent's built-in environment (the workbench sandbox is pure
    Python); a team's entry point or MCP server is not run here. WorkbenchDataMissing where its data is not."""
    name = batch.environment
    if not name:
        return EnvironmentFilter(skipped="the agent names no environment")
    if name not in environment_names():
        return EnvironmentFilter.skipping(name, TEAM_ENVIRONMENT_SKIPPED)
    return EnvironmentFilter.of(name, make_environment(name, batch.verifier, policy))


def _screened(batch: SyntheticBatch, seeds: list[RegressionTask]) -> tuple[list[Screened], EnvironmentFilter]:
    settings = _batch_settings(batch)
    seed_tasks = [Task.from_json(row.content) for row in seeds]
    heldout, train = _agent_tasks(batch.agent, Split.HELDOUT), _agent_tasks(batch.agent, Split.TRAIN)
    policy_json = agent_policy_json(batch.agent_id)
    policy = SafetyPolicy.from_json(policy_json) if policy_json is not None else None
    verifier = get_verifier(batch.verifier, policy)
    playing = _environment_filter(batch, policy)
    variants = generate(seed_tasks, settings.options(batch.agent.tools))
    return screen(variants, verifier=verifier, train=train, heldout=heldout, threshold=batch.threshold,
                  heldout_threshold=batch.heldout_threshold, extra_check=_strict_problems,
                  environment=playing), playing  # fmt: skip


def synthetic_batch_generate(*, batch_id: Any) -> SyntheticBatch | None:
    """Generate and screen a queued batch's variants; a batch that is not queued (done, or gone) is left alone."""
    with transaction.atomic():
        batch = SyntheticBatch.objects.select_for_update().select_related("agent").filter(pk=batch_id).first()
        if batch is None or batch.state != BatchState.QUEUED:
            return batch
        seeds = _seed_rows(batch.agent)
        try:
            screened, playing = _screened(batch, seeds)
        except (ContractError, ValueError, KeyError, WorkbenchDataMissing) as exc:
            batch.state, batch.error = BatchState.FAILED, f"{type(exc).__name__}: {exc}"
            batch.save(update_fields=["state", "error", "updated_at"])
            return batch
        by_id = {row.content["id"]: row for row in seeds}
        SyntheticCandidate.objects.bulk_create(
            SyntheticCandidate(batch=batch, position=position, seed_task=by_id.get(item.variant.seed_id),
                               method=item.variant.method, change=item.variant.change,
                               content=item.variant.task.to_json(),
                               rejected_by=item.rejection.filter if item.rejection else "",
                               reason=item.rejection.reason if item.rejection else "")
            for position, item in enumerate(screened)
        )  # fmt: skip
        batch.report = counts(screened, playing)
        batch.state, batch.seed_count = BatchState.READY, len(seeds)
        batch.save(update_fields=["report", "state", "seed_count", "updated_at"])
        return batch


@transaction.atomic
def synthetic_batch_accept(*, actor: Actor, batch: SyntheticBatch) -> SyntheticBatch:
    """Store every accepted variant of a ready batch as a train task, marked synthetic; raises BatchRefused.

    Each goes through `task_create`, so the leakage rule still holds: a variant whose prompt is
    held-out by now is refused and recorded as rejected at accept, the others are stored.
    """
    batch = SyntheticBatch.objects.select_for_update().select_related("agent").get(pk=batch.pk)
    if batch.state != BatchState.READY:
        raise BatchRefused(f"the batch is {batch.get_state_display().lower()}; only a batch ready for review "
                           "can be accepted")  # fmt: skip
    stored = refused = 0
    for candidate in batch.candidates.filter(rejected_by="").select_related("seed_task").order_by("position"):
        seed = candidate.seed_task
        origin = TaskOrigin(source_kind=SourceKind.SYNTHETIC, category=seed.category if seed else "",
                            source_ref=f"synthetic batch {batch.pk}, seed {seed.external_id if seed else '?'}, "
                                       f"{candidate.method}")  # fmt: skip
        try:
            with transaction.atomic():
                candidate.task = task_create(actor=actor, task=Task.from_json(candidate.content), split=Split.TRAIN,
                                             agent=batch.agent, origin=origin)  # fmt: skip
            stored += 1
        except (TaskRefused, ContractError) as exc:
            candidate.rejected_by, candidate.reason = REJECTED_AT_ACCEPT, str(exc)
            refused += 1
        candidate.save(update_fields=["task", "rejected_by", "reason"])
    batch.state, batch.accepted_by, batch.accepted_at = BatchState.ACCEPTED, actor_user(actor), timezone.now()
    batch.report = {**batch.report, "stored": stored, "refused_at_accept": refused}
    batch.save(update_fields=["state", "accepted_by", "accepted_at", "report", "updated_at"])
    audit_record(actor=actor, action="synthetic.accept", target=batch, data={"stored": stored, "refused": refused})
    return batch


SYNTH_KIND = "synth"
MODEL_METHOD = "model_paraphrase"


def _job_lines(job: Any) -> list[dict[str, Any]]:
    path = Path(str((job.result or {}).get("files", {}).get("variants", "")))
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _imported_candidate(batch: SyntheticBatch, position: int, line: dict[str, Any],
                        seeds: dict[str, RegressionTask]) -> SyntheticCandidate:  # fmt: skip
    rejected_by, reason = str(line.get("rejected_by") or ""), str(line.get("reason") or "")
    if not rejected_by and (problems := _strict_problems(Task.from_json(line["task"]))):
        rejected_by, reason = "schema", "; ".join(problems)
    return SyntheticCandidate(batch=batch, position=position, seed_task=seeds.get(str(line.get("seed_id"))),
                              method=str(line.get("method") or MODEL_METHOD)[:16], change=str(line.get("change", "")),
                              content=line["task"], rejected_by=rejected_by, reason=reason)  # fmt: skip


def _job_environment(job: Any) -> dict[str, Any]:
    """The synth job's report of its environment filter (a job from before the filter: none named)."""
    reported = ((job.result or {}).get("metrics") or {}).get("environment")
    return reported if isinstance(reported, dict) else NO_ENVIRONMENT.report()


def _report_of(candidates: list[SyntheticCandidate], environment: dict[str, Any]) -> dict[str, Any]:
    """The job's counts, recounted with the app's own check, and the job's word on its environment filter."""
    rejected = {name: 0 for name in FILTERS if name != "environment" or environment.get("applied")}
    for candidate in candidates:
        if candidate.rejected_by:
            rejected[candidate.rejected_by] = rejected.get(candidate.rejected_by, 0) + 1
    accepted = sum(not candidate.rejected_by for candidate in candidates)
    return {"generated": len(candidates), "rejected": rejected, "accepted": accepted,
            "accepted_by_method": {MODEL_METHOD: accepted}, "environment": environment}  # fmt: skip


@transaction.atomic
def synthetic_batch_from_job(*, job: Any) -> SyntheticBatch | None:
    """The batch of a succeeded synth job's screened variants, ready for review; the same batch when run twice.

    The app's strict value check (`validation`) joins the job's filters here, as it does for template
    batches. None for any other job, or a synth job that did not succeed.
    """
    if job.kind != SYNTH_KIND or job.state != "succeeded" or job.snapshot is None or job.agent_id is None:
        return None
    existing = SyntheticBatch.objects.filter(job_id=job.pk).first()
    if existing is not None:
        return existing
    settings = job.hyperparameters or {}
    batch = SyntheticBatch.objects.create(
        agent_id=job.agent_id, methods=[MODEL_METHOD], per_method=int(settings.get("paraphrases", 2)),
        seed=int(settings.get("seed", 0)), verifier=str(settings.get("verifier", DEFAULT_VERIFIER)),
        environment=str(settings.get("environment") or ""),
        threshold=float(settings.get("threshold", DEFAULT_THRESHOLD)),
        heldout_threshold=float(settings.get("heldout_threshold", HELDOUT_THRESHOLD)),
        created_by=job.launched_by, job_id=job.pk, state=BatchState.READY,
        seed_count=job.snapshot.task_count,
    )  # fmt: skip
    seeds = {item.content.get("id"): item.task for item in job.snapshot.items.select_related("task")}
    candidates = [_imported_candidate(batch, position, line, seeds) for position, line in enumerate(_job_lines(job))]
    SyntheticCandidate.objects.bulk_create(candidates)
    batch.report = _report_of(candidates, _job_environment(job))
    batch.save(update_fields=["report", "updated_at"])
    audit_record(actor=None, action="synthetic.from_job", target=batch, data={"job": str(job.pk)})
    return batch


def on_synth_job_finished(sender: object, job: Any, **kwargs: Any) -> None:
    """`training.signals.job_finished` receiver: a succeeded synth job's variants become a batch; never fail the job."""
    try:
        with transaction.atomic():
            synthetic_batch_from_job(job=job)
    except (OSError, ValueError, KeyError, ContractError) as error:
        logger.warning("datasets: synth job %s: %s", job.pk, error)
        audit_record(actor=None, action="synthetic.job_failed", target=job, data={"error": str(error)[:1000]})
