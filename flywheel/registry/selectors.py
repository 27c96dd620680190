"""Reads of the registry: versions, lineage, the live pointer, history, gates, and failure rates per version.

The reads that find an agent, a version, a live pointer or a gate from what a request names take
the viewer and find only those of agents they may see (`flywheel.core.selectors`); the others
take an agent or version found that way.
"""

from __future__ import annotations

import logging
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.db.models import Count, Q, QuerySet

from flywheel.core.models import Agent, AuditEvent
from flywheel.core.roles import Perm
from flywheel.core.selectors import agents_filter, visible_agents
from flywheel.ingest.models import Outcome, Trajectory
from flywheel.registry import guardrails, storage
from flywheel.registry.models import (
    Deployment,
    GatePolicy,
    GateResult,
    GateStatus,
    LivePointer,
    ModelVersion,
    Replay,
    ReplayStatus,
)
from flywheel.training.models import EvalRun
from flywheel.training.selectors import EVAL_RATES, metric_series
from flywheel.triage.selectors import agent_guardrails_json
from trainer.spec.decision import decide, flip_rows, paired
from trainer.spec.gate import Policy

logger = logging.getLogger(__name__)
TAG = re.compile(r"^(?P<agent>[-\w]+):v(?P<number>\d+)$")
FINISHED_GATES = (GateStatus.PASSED, GateStatus.FAILED)


def agent_list_with_versions(*, viewer: User) -> QuerySet[Agent]:
    return (
        visible_agents(viewer)
        .annotate(version_count=Count("model_versions"))
        .select_related("live_pointer__version__agent")
        .order_by("name")
    )


def version_list(*, agent: Agent) -> QuerySet[ModelVersion]:
    return ModelVersion.objects.filter(agent=agent).select_related("agent", "parent__agent", "training_job")


def version_get(*, agent_name: str, number: int, viewer: User) -> ModelVersion | None:
    return (
        ModelVersion.objects.filter(agents_filter(viewer))
        .select_related("agent", "parent__agent", "training_job")
        .filter(agent__name=agent_name, number=number)
        .first()
    )


def version_by_tag(*, tag: str, viewer: User) -> ModelVersion | None:
    """The version a model version tag such as `support-bot:v3` names; None when it names none (of `viewer`'s)."""
    match = TAG.match(tag.strip())
    if match is None:
        return None
    return version_get(agent_name=match["agent"], number=int(match["number"]), viewer=viewer)


def lineage(*, version: ModelVersion) -> list[ModelVersion]:
    """The version's ancestors, oldest first, ending with the version itself."""
    chain = [version]
    seen = {version.pk}
    while chain[0].parent_id is not None and chain[0].parent_id not in seen:
        parent = ModelVersion.objects.select_related("agent", "training_job").get(pk=chain[0].parent_id)
        seen.add(parent.pk)
        chain.insert(0, parent)
    return chain


def live_version(*, agent: Agent) -> ModelVersion | None:
    pointer = LivePointer.objects.select_related("version__agent").filter(agent=agent).first()
    return pointer.version if pointer else None


def live_pointer_for(*, agent_name: str, viewer: User) -> LivePointer | None:
    return (
        LivePointer.objects.filter(agents_filter(viewer))
        .select_related("version__agent", "deployment", "agent")
        .filter(agent__name=agent_name)
        .first()
    )


def guardrails_for(*, agent: Agent) -> guardrails.Guardrails:
    """The agent's guardrails as the chat endpoint applies them; never raises (unreadable ones fail closed)."""
    try:
        policy, settings = agent_guardrails_json(agent.pk)
    except Exception as error:  # the database: no response fails because of the guardrails
        logger.warning("the guardrails of %s could not be read", agent.name, exc_info=True)
        return guardrails.Guardrails.unreadable(str(error) or repr(error))
    return guardrails.Guardrails.from_stored(policy, settings)


def deployment_history(*, agent: Agent) -> QuerySet[Deployment]:
    # The history shows each gate's status; its per-task report can run to megabytes.
    return (
        Deployment.objects.filter(agent=agent)
        .select_related("from_version__agent", "to_version__agent", "gate_result")
        .defer("gate_result__report")
    )


def previous_version(*, agent: Agent, current: ModelVersion) -> ModelVersion | None:
    """The newest earlier version that was live once: where "roll back" goes by default."""
    return (
        ModelVersion.objects.filter(agent=agent, number__lt=current.number, deployments__isnull=False)
        .select_related("agent")
        .order_by("-number")
        .first()
    )


def earlier_versions(*, agent: Agent, current: ModelVersion) -> QuerySet[ModelVersion]:
    return ModelVersion.objects.filter(agent=agent, number__lt=current.number).select_related("agent")


def audit_trail(*, agent: Agent) -> QuerySet[AuditEvent]:
    """Every audited change to the agent's versions (registered, gated, promoted, rolled back) and its policy."""
    version_ids = [str(pk) for pk in ModelVersion.objects.filter(agent=agent).values_list("pk", flat=True)]
    return AuditEvent.objects.filter(
        Q(target_type=ModelVersion._meta.label, target_id__in=version_ids)
        | Q(target_type=Agent._meta.label, target_id=str(agent.pk), action__startswith="gate_policy.")
    ).order_by("-created_at")


def gate_results(*, version: ModelVersion) -> QuerySet[GateResult]:
    return (
        GateResult.objects.filter(candidate=version)
        .select_related("job", "baseline__agent", "candidate__agent")
        .defer("report")  # the version page lists decisions; the gate's own page reads the report
    )


def gate_for_promotion(*, version: ModelVersion, baseline: ModelVersion | None) -> GateResult | None:
    """The latest finished gate of `version` against `baseline` (the live version, or None for the base)."""
    return (
        GateResult.objects.filter(candidate=version, baseline=baseline, status__in=FINISHED_GATES)
        .order_by("-created_at")
        .first()
    )


def gate_result_get(*, gate_id: Any, viewer: User) -> GateResult | None:
    return (
        GateResult.objects.filter(agents_filter(viewer, "candidate__agent"))
        .select_related("job", "candidate__agent", "candidate__training_job", "baseline__agent")
        .filter(pk=gate_id)
        .first()
    )


def gate_policy(*, agent: Agent) -> Policy:
    """The agent's policy: its stored fields over trainer's defaults (a policy stored before a knob existed loads)."""
    stored = GatePolicy.objects.filter(agent=agent).values_list("policy", flat=True).first() or {}
    return Policy.from_stored(stored)


def adapter_folder(*, version: ModelVersion) -> Path:
    """The version's adapter folder, after verifying its files against the registered hashes."""
    folder = storage.registry_root() / version.storage_path
    return storage.verify_files(folder, sha256=version.adapter_sha256, config_sha256=version.config_sha256)


def adapter_location(*, version: ModelVersion) -> Path:
    """Where the version's adapter lies (not verified: for display and the live API)."""
    return storage.registry_root() / version.storage_path


def vllm_command(*, version: ModelVersion) -> str:
    """A shell command, from the repository root, that serves the version with vLLM as the trainer prompted it.

    The model alias resolves to its folder, the trainer's chat template and the hermes tool parser
    make a chat request the trained prompt and read the calls back, and adapters may be loaded later.
    """
    base = shlex.quote(version.base_model)
    return (
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server \\\n"
        f"  --model \"$(.venv/bin/python -m trainer models path {base})\" --served-model-name {base} \\\n"
        f"  --enable-lora --max-lora-rank 64 --lora-modules "
        f"{version.serve_name}={shlex.quote(str(adapter_location(version=version)))} \\\n"
        "  --chat-template \"$(.venv/bin/python -m trainer chat-template)\" --chat-template-content-format string \\\n"
        "  --enable-auto-tool-choice --tool-call-parser hermes"
    )


def live_info(*, pointer: LivePointer) -> dict[str, Any]:
    """What `GET /api/v1/agents/<agent>/live` answers."""
    version = pointer.version
    return {
        "agent": pointer.agent.name,
        "version": version.tag,
        "number": version.number,
        "base_model": version.base_model,
        "adapter": {
            "location": str(adapter_location(version=version)),
            "sha256": version.adapter_sha256,
            "config_sha256": version.config_sha256,
            "lora_module": version.serve_name,
        },  # fmt: skip
        "promoted_at": pointer.deployment.created_at.isoformat(),
        "deployment": {"id": str(pointer.deployment.pk), "action": pointer.deployment.action},
    }


# --- Failure rates per version: trajectories carry the version tag ---------------------------


@dataclass(frozen=True)
class VersionFailures:
    tag: str
    version: ModelVersion | None
    total: int
    failures: int

    @property
    def rate(self) -> float | None:
        return self.failures / self.total if self.total else None


def failures_by_version(*, agent: Agent) -> list[VersionFailures]:
    """Per model version tag the agent's trajectories carried: how many, how many failed; newest version first."""
    rows = (
        Trajectory.objects.filter(agent=agent)
        .exclude(model_version="")
        .values("model_version")
        # Counted over columns of the index that covers them (an id would send the count to the table).
        .annotate(total=Count("*"), failures=Count("outcome", filter=Q(outcome=Outcome.FAILURE)))
    )
    versions = {version.tag: version for version in version_list(agent=agent)}
    found = [VersionFailures(row["model_version"], versions.get(row["model_version"]), row["total"], row["failures"])
             for row in rows]  # fmt: skip
    return sorted(found, key=lambda row: (-(row.version.number if row.version else 0), row.tag))


# --- The baseline-vs-tuned comparison ---------------------------------------------------------

COMPARED_RATES = tuple(name for name, _label in EVAL_RATES if name.endswith("_rate"))
COMPARED_NUMBERS = ("latency_p50_s", "latency_p95_s", "prompt_tokens_per_task", "completion_tokens_per_task",
                    "cost_per_task")  # fmt: skip


@dataclass(frozen=True)
class MetricPair:
    name: str
    baseline: dict[str, Any]
    candidate: dict[str, Any]

    @property
    def delta(self) -> float | None:
        before, after = self.baseline.get("value"), self.candidate.get("value")
        return after - before if isinstance(before, (int, float)) and isinstance(after, (int, float)) else None


@dataclass(frozen=True)
class Comparison:
    overall: list[MetricPair]
    by_bucket: dict[str, list[MetricPair]]
    fixed: list[dict[str, Any]]
    broken: list[dict[str, Any]]
    reward_curves: dict[str, list[tuple[int, float]]]


def _pairs(baseline: dict[str, Any], candidate: dict[str, Any]) -> list[MetricPair]:
    pairs = [MetricPair(name, baseline.get(name) or {}, candidate.get(name) or {}) for name in COMPARED_RATES]
    pairs += [MetricPair(name, {"value": baseline.get(name)}, {"value": candidate.get(name)})
              for name in COMPARED_NUMBERS]  # fmt: skip
    return pairs


def comparison(*, gate: GateResult) -> Comparison:
    """Side by side per metric (with intervals), per bucket, the per-task flips, and the training curves."""
    job = gate.candidate.training_job
    return paired_view(gate.report or {}, metric_series(job=job) if job is not None else {})


def paired_view(report: dict[str, Any], series: dict[str, list[tuple[int, float]]]) -> Comparison:
    """A gate-shaped report (`baseline`, `candidate`: overall and by_bucket; `tasks`: flips) as the paired view."""
    baseline, candidate = report.get("baseline") or {}, report.get("candidate") or {}
    buckets = sorted(set(baseline.get("by_bucket") or {}) | set(candidate.get("by_bucket") or {}))
    tasks = report.get("tasks") or []
    return Comparison(
        overall=_pairs(baseline.get("overall") or {}, candidate.get("overall") or {}),
        by_bucket={name: _pairs((baseline.get("by_bucket") or {}).get(name) or {},
                                (candidate.get("by_bucket") or {}).get(name) or {}) for name in buckets},
        fixed=[row for row in tasks if row.get("candidate") and not row.get("baseline")],
        broken=[row for row in tasks if row.get("baseline") and not row.get("candidate")],
        reward_curves={name: points for name, points in series.items()
                       if name.startswith(("reward", "heldout/", "loss"))},
    )  # fmt: skip


# --- Two evaluations of one snapshot, paired as the gate pairs them ------------------------------


class NotComparable(Exception):
    """Two evaluations that cannot be paired task by task (another snapshot, other tasks); the reason in words."""


@dataclass(frozen=True)
class EvalComparison:
    """A candidate evaluation (a prompt change, say) against a baseline one, as the gate would decide and show it."""

    baseline: EvalRun
    candidate: EvalRun
    decision: dict[str, Any]
    view: Comparison


def eval_comparison(*, baseline: EvalRun, candidate: EvalRun) -> EvalComparison:
    """The gate's decision and paired view over two evaluations of one snapshot, under the agent's gate policy.

    No regression tasks: both runs evaluated the same held-out tasks, nothing else. A NotComparable
    names why two runs cannot be paired.
    """
    if baseline.snapshot_id != candidate.snapshot_id:
        raise NotComparable("the two evaluations ran on different snapshots: only the same tasks pair up")
    agent = candidate.job.agent or candidate.snapshot.agent
    policy = gate_policy(agent=agent) if agent is not None else Policy()
    results_before, results_after = baseline.results or [], candidate.results or []
    try:
        decision = decide(results_after, results_before, [], [], policy)
        flips = flip_rows(paired(results_after, results_before), policy.metric, "heldout")
    except (ValueError, KeyError) as error:  # other tasks (a sample of the snapshot), or results without ids
        raise NotComparable(f"the two evaluations cannot be paired task by task: {error}") from None
    report = {"baseline": {"overall": baseline.metrics or {}, "by_bucket": baseline.per_bucket or {}},
              "candidate": {"overall": candidate.metrics or {}, "by_bucket": candidate.per_bucket or {}},
              "tasks": flips}  # fmt: skip
    return EvalComparison(baseline, candidate, decision.to_json(), paired_view(report, {}))


# --- Replays of failing steps -----------------------------------------------------------------

# The checks of `trainer.verifiers.answer` an approver compares, each with whether True is good.
REPLAY_CHECKS: tuple[tuple[str, str, bool], ...] = (
    ("valid_json", "Calls written as JSON", True),
    ("schema_valid", "Calls fit the tools' schemas", True),
    ("unsafe", "Breaks the agent's safety policy", False),
    ("correct_tool", "Right tool", True),
    ("correct_arguments", "Right arguments", True),
    ("passed", "Passes the tool_call verifier", True),
)


def can_replay(user: User | None) -> bool:
    """Whether `user` may launch replays: trainers (they launch jobs) and approvers (they decide promotions)."""
    return user is not None and (user.has_perm(Perm.LAUNCH_JOBS) or user.has_perm(Perm.APPROVE_VERSIONS))


@dataclass(frozen=True)
class Cell:
    """One check of one answer as a page shows it: its text, and `good`, `bad` or "" (it did not apply)."""

    text: str
    tone: str


def score_cells(scores: dict[str, Any] | None) -> list[Cell]:
    """The answer's checks (REPLAY_CHECKS order), then its reward; all "—" without scores (not answered yet)."""
    cells = []
    for key, _label, good_when in REPLAY_CHECKS:
        value = (scores or {}).get(key)
        if value is None:
            cells.append(Cell("—", ""))
        else:
            cells.append(Cell("yes" if value else "no", "good" if bool(value) == good_when else "bad"))
    reward = (scores or {}).get("reward")
    cells.append(Cell("—" if reward is None else f"{reward:.2f}", ""))
    return cells


@dataclass(frozen=True)
class ScoreRow:
    label: str
    original: Cell
    replays: list[Cell]


@dataclass(frozen=True)
class ReplayGroup:
    """The replays of one step: the recorded answer (the case's `original`) and each version's, scored alike."""

    step_index: int
    case: dict[str, Any]
    replays: list[Replay]
    rows: list[ScoreRow]

    @property
    def pending(self) -> bool:
        return any(replay.status == ReplayStatus.PENDING and not replay.job.is_finished for replay in self.replays)


def _score_rows(original: dict[str, Any] | None, replays: list[Replay]) -> list[ScoreRow]:
    labels = [label for _key, label, _good in REPLAY_CHECKS] + ["Reward (tool_call)"]
    columns = [score_cells(replay.scores if replay.status == ReplayStatus.DONE else None) for replay in replays]
    return [ScoreRow(label, score_cells(original)[row], [column[row] for column in columns])
            for row, label in enumerate(labels)]  # fmt: skip


def replay_visible(*, viewer: User) -> QuerySet[Replay]:
    return Replay.objects.filter(agents_filter(viewer, "trajectory__agent")).select_related(
        "version__agent", "job", "launched_by", "trajectory__agent"
    )


def replay_groups(*, trajectory: Trajectory, viewer: User) -> list[ReplayGroup]:
    """The trajectory's replays by step, oldest first in each; the recorded answer's scores from a finished one."""
    rows = list(replay_visible(viewer=viewer).filter(trajectory=trajectory).order_by("step_index", "created_at"))
    groups = []
    for step_index in sorted({replay.step_index for replay in rows}):
        replays = [replay for replay in rows if replay.step_index == step_index]
        original = next((r.original_scores for r in replays if r.status == ReplayStatus.DONE), None)
        groups.append(ReplayGroup(step_index, replays[0].case, replays, _score_rows(original, replays)))
    return groups


def replay_get(*, replay_id: Any, viewer: User) -> Replay | None:
    return replay_visible(viewer=viewer).filter(pk=replay_id).first()


def replay_rows(*, replay: Replay) -> list[ScoreRow]:
    """One replay's checks beside the recorded answer's."""
    return _score_rows(replay.original_scores if replay.status == ReplayStatus.DONE else None, [replay])


def replay_choices(*, agent: Agent) -> tuple[list[ModelVersion], ModelVersion | None]:
    """The versions a replay may run against (newest first) and the live one among them."""
    return list(version_list(agent=agent)), live_version(agent=agent)
