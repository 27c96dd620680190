"""A worker SIGKILLed in the middle of a gate job: the gate runs again and one decision is recorded.

A real worker runs the gate with the scripted trainer stand-in (its gate.json names the pid that
decided); the test kills the worker, the reaper requeues the job, a second worker runs it to the end.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from flywheel.core.models import AuditEvent
from flywheel.core.roles import Role
from flywheel.core.services import agent_create
from flywheel.datasets.importers import read
from flywheel.datasets.services import snapshot_create, tasks_import
from flywheel.registry.models import GateResult
from flywheel.registry.services import gate_launch, version_register
from flywheel.training import runner
from flywheel.training import services as training_services
from flywheel.training.models import MetricPoint
from tests.faults.conftest import adapter
from tests.flywheel.training.conftest import TINY_TASKS, alive, pids_of, scripted_env, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_worker_killed_during_a_gate_job_reruns_the_gate_and_records_one_decision(
    make_user, celery_worker_process, settings, tmp_path
):
    settings.REGISTRY_DIR = str(tmp_path / "registry")
    agent = agent_create(actor=None, name="support-bot", description="")
    candidate = version_register(actor=None, agent=agent, adapter_dir=adapter(tmp_path / "adapter", 1000, 1),
                                 base_model="tiny")  # fmt: skip
    tasks_import(actor=None, candidates=read(TINY_TASKS, "native"), split="heldout", agent=agent, source_ref="tiny")
    heldout = snapshot_create(actor=None, name="held-out", split="heldout", agent=agent)
    # Five steps of a second each: long enough to be killed in the middle.
    slow_gate = {**scripted_env(), "SCRIPTED_STEP_SECONDS": "1", "REGISTRY_DIR": settings.REGISTRY_DIR}
    worker = celery_worker_process("gpu", env=slow_gate)
    gate = gate_launch(actor=make_user(Role.APPROVER), candidate=candidate, heldout_snapshot=heldout)
    job = wait_for(gate.job, ("running",))
    first_trainer = pids_of(job)["trainer"]
    deadline = time.monotonic() + 30
    while not MetricPoint.objects.filter(job=job).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    worker.kill()
    worker.wait()
    time.sleep(1)
    assert not alive(first_trainer)  # the killed attempt's trainer died with its worker
    gate.refresh_from_db()
    assert gate.status == "pending"

    assert [j.pk for j in training_services.jobs_reap(stale_after=timedelta(0))] == [job.pk]
    celery_worker_process("gpu", env=slow_gate)
    job = wait_for(job, ("succeeded", "failed"), timeout=60)
    assert (job.state, job.attempts) == ("succeeded", 2), job.error + job.log_tail
    gate.refresh_from_db()
    assert gate.status == "passed" and gate.error == ""
    assert gate.decision["summary"] != f"scripted decision of pid {first_trainer}"  # the second run's decision
    # A late delivery of the job's message, as the broker may still make: no third run, no second decision.
    assert runner.job_run(job_id=job.pk, worker="late") is None
    assert GateResult.objects.filter(candidate=candidate).count() == 1
    decisions = AuditEvent.objects.filter(action__startswith="gate.", target_id=str(candidate.pk))
    assert sorted(decisions.values_list("action", flat=True)) == ["gate.launch", "gate.passed"]
