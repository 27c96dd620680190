"""Dashboards fixtures: the tau-bench airline trajectories, and rows for the home page's tiles.

The registry rows (versions, gates, deployments, live pointers) are created directly: the home page
reads them, and the registry's services would need real adapter files to register a version.
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import uuid4

import pytest
from django.utils import timezone

from flywheel.core.models import Agent
from flywheel.datasets.models import RegressionTask, SourceKind, TaskSetSnapshot
from flywheel.registry.models import (
    Deployment,
    DeploymentAction,
    GateResult,
    GateStatus,
    LivePointer,
    ModelVersion,
)
from flywheel.training.models import Job, JobKind, JobState
from tests.flywheel.triage.conftest import tau_airline, tau_bench_path  # noqa: F401  (shared fixtures)


def rate(value: float, low: float, high: float) -> dict[str, float]:
    return {"value": value, "low": low, "high": high, "n": 50}


@pytest.fixture
def make_tasks(db) -> Callable[[str, int], list[RegressionTask]]:
    """make_tasks(split, n): n regression tasks of that split, each its own leakage key."""

    def make(split: str, n: int) -> list[RegressionTask]:
        tasks = []
        for _ in range(n):
            key = uuid4().hex
            tasks.append(RegressionTask.objects.create(
                external_id=f"task-{key[:8]}", split=split, source_kind=SourceKind.MANUAL, content={"messages": []},
                content_hash=key, leakage_key=key, leakage_text=key,
            ))  # fmt: skip
        return tasks

    return make


@pytest.fixture
def make_snapshot(db) -> Callable[..., TaskSetSnapshot]:
    def make(split: str = "heldout") -> TaskSetSnapshot:
        return TaskSetSnapshot.objects.create(name=f"{split} set", split=split, content_hash=uuid4().hex, task_count=0)

    return make


@pytest.fixture
def make_job(make_snapshot) -> Callable[..., Job]:
    def make(state: str, kind: str = JobKind.SFT, **fields) -> Job:
        return Job.objects.create(kind=kind, state=state, snapshot=make_snapshot(), base_model="tiny", **fields)

    return make


@pytest.fixture
def make_gate(make_job) -> Callable[..., GateResult]:
    """make_gate(version, candidate=(value, low, high), baseline=..., passed=...): a finished gate's row."""

    def make(version: ModelVersion, *, candidate=(0.62, 0.51, 0.72), baseline=(0.4, 0.3, 0.5), passed=True,
             metric="correct_arguments", against: ModelVersion | None = None) -> GateResult:  # fmt: skip
        job = make_job(JobState.SUCCEEDED, kind=JobKind.GATE, finished_at=timezone.now())
        report = {
            "candidate": {"overall": {f"{metric}_rate": rate(*candidate)}, "by_bucket": {}},
            "baseline": {"overall": {f"{metric}_rate": rate(*baseline)}, "by_bucket": {}},
            "tasks": [{"set": "heldout", "task_id": str(n), "candidate": True, "baseline": False} for n in range(50)],
        }
        return GateResult.objects.create(
            job=job, candidate=version, baseline=against, policy={"metric": metric}, report=report,
            status=GateStatus.PASSED if passed else GateStatus.FAILED, decision={"passed": passed, "criteria": []},
        )  # fmt: skip

    return make


@pytest.fixture
def make_version(db) -> Callable[..., ModelVersion]:
    def make(agent_name: str, number: int = 1) -> ModelVersion:
        agent, _ = Agent.objects.get_or_create(name=agent_name)
        return ModelVersion.objects.create(
            agent=agent, number=number, base_model="tiny", adapter_sha256=uuid4().hex + uuid4().hex,
            config_sha256="c" * 64, storage_path=f"{agent_name}/v{number}",
        )  # fmt: skip

    return make


@pytest.fixture
def make_live(make_version, make_gate) -> Callable[..., ModelVersion]:
    """make_live(agent_name, number, gate=True): a version made live on a passed gate against the base model."""

    def make(agent_name: str, number: int = 2, *, gate: bool = True, **gate_fields) -> ModelVersion:
        version = make_version(agent_name, number)
        gate_result = make_gate(version, **gate_fields) if gate else None
        deployment = Deployment.objects.create(
            agent=version.agent, action=DeploymentAction.PROMOTE, to_version=version, to_sha256=version.adapter_sha256,
            actor_name="approver", gate_result=gate_result, override=gate_result is None,
        )  # fmt: skip
        LivePointer.objects.update_or_create(
            agent=version.agent, defaults={"version": version, "deployment": deployment}
        )
        return version

    return make
