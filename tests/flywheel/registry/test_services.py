"""Registry services: registering trained adapters, gates, promote, roll back, the audit trail, immutability."""

from __future__ import annotations

import json
import stat
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from flywheel.core.models import AuditEvent
from flywheel.core.roles import Role
from flywheel.core.services import agent_create
from flywheel.ingest.models import Trajectory
from flywheel.registry import selectors, services, storage
from flywheel.registry.models import Deployment, GatePolicy, GateResult, GateStatus, LivePointer, ModelVersion
from flywheel.training.models import Job, JobKind
from tests.flywheel.registry.conftest import TINY_MODEL, done, finish_job
from tests.flywheel.registry.gate_reports import NOISE, WINNING, gate_files
from trainer.spec.adapters import MANIFEST_FILE, WEIGHTS_FILE, file_sha256
from trainer.spec.gate import Policy

pytestmark = pytest.mark.django_db


@pytest.fixture
def approver(make_user):
    return make_user(Role.APPROVER)


def manifest_sha(folder) -> str:
    return json.loads((folder / MANIFEST_FILE).read_text())["sha256"]


# --- Registration ---------------------------------------------------------------------------


def test_a_succeeded_sft_job_registers_its_adapter_as_the_agents_next_version(agent, adapters, heldout_snapshot):
    job = finish_job(kind=JobKind.SFT, snapshot=heldout_snapshot, agent=agent,
                     result=done({"adapter_dir": str(adapters[0])}, {"train/loss": 0.5}),
                     hyperparameters={"learning_rate": 0.001}, heldout_snapshot=heldout_snapshot)  # fmt: skip
    assert job.state == "succeeded"
    version = ModelVersion.objects.get(training_job=job)
    assert (version.number, version.tag, version.parent) == (1, "support-bot:v1", None)
    assert version.adapter_sha256 == manifest_sha(adapters[0]) and version.base_model == str(TINY_MODEL)
    assert version.config == {"kind": "sft", "learning_rate": 0.001} and version.metrics == {"train/loss": 0.5}
    assert version.snapshot_hash == version.heldout_snapshot_hash == heldout_snapshot.content_hash
    # Copied into the registry, read-only, with the recorded hash.
    folder = selectors.adapter_folder(version=version)
    assert folder.is_relative_to(storage.registry_root()) and folder != adapters[0]
    assert file_sha256(folder / WEIGHTS_FILE) == version.adapter_sha256
    assert not (folder / WEIGHTS_FILE).stat().st_mode & stat.S_IWUSR
    assert services.version_register_from_job(job=job) == version  # a second call registers nothing new
    assert AuditEvent.objects.filter(action="version.register", target_id=str(version.pk)).count() == 1


def test_a_succeeded_dpo_job_registers_its_adapter_as_sft_and_grpo_jobs_do(agent, adapters, heldout_snapshot):
    job = finish_job(kind=JobKind.DPO, snapshot=heldout_snapshot, agent=agent,
                     result=done({"adapter_dir": str(adapters[1])}, {"train/rewards/margins": 0.4}),
                     hyperparameters={"beta": 0.2})  # fmt: skip
    version = ModelVersion.objects.get(training_job=job)
    assert (version.number, version.adapter_sha256) == (1, manifest_sha(adapters[1]))
    assert version.config == {"kind": "dpo", "beta": 0.2} and version.metrics == {"train/rewards/margins": 0.4}


def test_a_grpo_job_started_from_a_version_registers_the_next_number_with_that_parent(
    agent, adapters, heldout_snapshot, register
):
    first = register(0)
    parent_folder = selectors.adapter_folder(version=first)
    job = finish_job(kind=JobKind.GRPO, snapshot=heldout_snapshot, agent=agent, adapter=str(parent_folder),
                     result=done({"adapter_dir": str(adapters[1])}))  # fmt: skip
    second = ModelVersion.objects.get(training_job=job)
    assert (second.number, second.parent) == (2, first)
    assert [v.tag for v in selectors.lineage(version=second)] == ["support-bot:v1", "support-bot:v2"]


def test_failed_jobs_and_jobs_without_an_agent_register_nothing(agent, adapters, heldout_snapshot):
    finish_job(kind=JobKind.SFT, snapshot=heldout_snapshot, agent=agent, exit_code=1,
               result=done({"adapter_dir": str(adapters[0])}))  # fmt: skip
    orphan = finish_job(kind=JobKind.SFT, snapshot=heldout_snapshot, agent=None,
                        result=done({"adapter_dir": str(adapters[0])}))  # fmt: skip
    assert orphan.state == "succeeded" and not ModelVersion.objects.exists()
    skipped = AuditEvent.objects.get(action="version.register_skipped")
    assert skipped.data == {"reason": "the job has no agent"}


def test_a_job_whose_adapter_is_broken_still_finishes_and_the_problem_is_recorded(agent, heldout_snapshot, tmp_path):
    job = finish_job(kind=JobKind.SFT, snapshot=heldout_snapshot, agent=agent,
                     result=done({"adapter_dir": str(tmp_path / "missing")}))  # fmt: skip
    assert Job.objects.get(pk=job.pk).state == "succeeded" and not ModelVersion.objects.exists()
    assert "cannot be registered" in AuditEvent.objects.get(action="registry.job_failed").data["error"]


def test_a_tampered_registered_file_is_refused_on_every_load(register, approver):
    version = register(0)
    folder = selectors.adapter_folder(version=version)
    weights = folder / WEIGHTS_FILE
    weights.chmod(0o644)
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x00")
    with pytest.raises(storage.AdapterTampered, match="the registry says"):
        selectors.adapter_folder(version=version)
    # Rewriting the manifest to match does not help: the database holds the reference hash.
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    (folder / MANIFEST_FILE).chmod(0o644)
    (folder / MANIFEST_FILE).write_text(json.dumps({**manifest, "sha256": file_sha256(weights)}))
    with pytest.raises(storage.AdapterTampered):
        selectors.adapter_folder(version=version)
    with pytest.raises(services.RegistryRefused, match="refusing to load"):
        services.version_promote(actor=approver, version=version, reason="try anyway")
    assert not LivePointer.objects.exists()


# --- Gates ----------------------------------------------------------------------------------


def test_a_gate_is_launched_against_the_live_version_with_the_agents_policy(
    register, approver, make_user, heldout_snapshot
):
    first, second = register(0), register(1)
    services.version_promote(actor=approver, version=first, reason="first version, no gate yet")
    services.gate_policy_set(actor=None, agent=first.agent, policy={"test": "mcnemar", "max_regression_failures": 2})
    gate = services.gate_launch(actor=make_user(Role.TRAINER), candidate=second, heldout_snapshot=heldout_snapshot,
                                options={"device": "cpu", "max_new_tokens": 16})  # fmt: skip
    job = gate.job
    assert (job.kind, job.agent, job.snapshot, job.base_model) == ("gate", second.agent, heldout_snapshot,
                                                                   str(TINY_MODEL))
    assert job.adapter == str(selectors.adapter_folder(version=second))
    assert job.hyperparameters["baseline_adapter"] == str(selectors.adapter_folder(version=first))
    assert job.hyperparameters["test"] == "mcnemar" and job.hyperparameters["max_new_tokens"] == 16
    assert (gate.baseline, gate.status, gate.policy["max_regression_failures"]) == (first, "pending", 2)


def test_a_gate_refuses_train_snapshots_bad_options_and_the_live_version_itself(
    register, approver, heldout_snapshot
):
    version = register(0)
    with pytest.raises(services.RegistryRefused, match="unknown metric"):
        services.gate_launch(actor=None, candidate=version, heldout_snapshot=heldout_snapshot,
                             options={"metric": "vibes"})  # fmt: skip
    heldout_snapshot.split = "train"
    with pytest.raises(services.RegistryRefused, match="not held-out"):
        services.gate_launch(actor=None, candidate=version, heldout_snapshot=heldout_snapshot)
    heldout_snapshot.split = "heldout"
    services.version_promote(actor=approver, version=version, reason="no gate")
    with pytest.raises(services.RegistryRefused, match="live version already"):
        services.gate_launch(actor=None, candidate=version, heldout_snapshot=heldout_snapshot)


def finished_gate(version, snapshot, files, baseline=None, exit_code=0) -> GateResult:
    job = Job.objects.create(kind=JobKind.GATE, state="running", snapshot=snapshot, agent=version.agent,
                             base_model=version.base_model, attempts=1, result=done(files))  # fmt: skip
    gate = GateResult.objects.create(job=job, candidate=version, baseline=baseline, policy=Policy().to_json())
    from flywheel.training.services import job_finish

    job_finish(job=job, exit_code=exit_code, stderr_tail="", cancelled=False)
    gate.refresh_from_db()
    return gate


def test_a_finished_gate_job_stores_its_decision_with_each_reason(register, heldout_snapshot, tmp_path):
    version = register(0)
    gate = finished_gate(version, heldout_snapshot, gate_files(tmp_path, *WINNING))
    assert gate.status == GateStatus.PASSED and gate.passed
    assert [c["name"] for c in gate.criteria] == ["gain", "heldout_breakage", "buckets", "safety", "latency",
                                                  "tokens", "regressions"]
    assert "above zero" in gate.criteria[0]["reason"]
    assert gate.report["candidate"]["overall"]["correct_arguments_rate"]["value"] == 0.75
    assert AuditEvent.objects.filter(action="gate.passed", target_id=str(version.pk)).exists()


def test_a_gate_job_that_failed_leaves_its_gate_in_error(register, heldout_snapshot):
    version = register(0)
    gate = finished_gate(version, heldout_snapshot, {}, exit_code=1)
    assert gate.status == GateStatus.ERROR and "exited with code 1" in gate.error


def test_a_gate_whose_job_the_reaper_gave_up_on_or_that_was_cancelled_while_queued_ends_in_error(
    register, heldout_snapshot
):
    from flywheel.training.services import job_cancel, jobs_reap

    version = register(0)
    gates = []
    for state in ("running", "queued"):
        job = Job.objects.create(kind=JobKind.GATE, state=state, snapshot=heldout_snapshot, agent=version.agent,
                                 base_model=version.base_model, attempts=3)  # fmt: skip
        gates.append(GateResult.objects.create(job=job, candidate=version, policy=Policy().to_json()))
    Job.objects.filter(pk=gates[0].job_id).update(heartbeat_at=gates[0].job.created_at - timedelta(hours=1))
    jobs_reap()
    job_cancel(actor=None, job=gates[1].job)
    for gate in gates:
        gate.refresh_from_db()
    assert [(gate.status, gate.error) for gate in gates] == [
        (GateStatus.ERROR, "worker lost after 3 attempt(s)"), (GateStatus.ERROR, "the gate job ended cancelled")]


# --- Promote and roll back ------------------------------------------------------------------


def test_promoting_after_a_passed_gate_needs_no_reason(register, approver, heldout_snapshot, tmp_path):
    version = register(0)
    gate = finished_gate(version, heldout_snapshot, gate_files(tmp_path, *WINNING))
    deployment = services.version_promote(actor=approver, version=version)
    assert (deployment.gate_result, deployment.override, deployment.from_version) == (gate, False, None)
    assert selectors.live_version(agent=version.agent) == version


def test_promoting_after_a_failed_gate_without_a_reason_is_refused(register, approver, heldout_snapshot, tmp_path):
    version = register(0)
    finished_gate(version, heldout_snapshot, gate_files(tmp_path, *NOISE))
    with pytest.raises(services.RegistryRefused, match="failed its gate.*written override reason"):
        services.version_promote(actor=approver, version=version, reason="   ")
    assert not LivePointer.objects.exists() and not Deployment.objects.exists()
    deployment = services.version_promote(actor=approver, version=version, reason="the noise is on our side")
    assert deployment.override and deployment.reason == "the noise is on our side"


def test_a_gate_against_another_baseline_does_not_count(register, approver, heldout_snapshot, tmp_path):
    first, second = register(0), register(1)
    finished_gate(second, heldout_snapshot, gate_files(tmp_path, *WINNING))  # against the base model
    services.version_promote(actor=approver, version=first, reason="no gate")
    with pytest.raises(services.RegistryRefused, match="no finished gate against support-bot:v1"):
        services.version_promote(actor=approver, version=second)


def test_only_approvers_promote_and_roll_back(register, make_user):
    version = register(0)
    for role in (Role.VIEWER, Role.TRAINER, Role.REVIEWER, None):
        with pytest.raises(PermissionDenied):
            services.version_promote(actor=make_user(role), version=version, reason="x")
    with pytest.raises(PermissionDenied):
        services.version_rollback(actor=None, agent=version.agent, reason="x")


def test_a_double_click_promotes_once_and_a_stale_page_is_refused(register, approver):
    first, second, third = register(0), register(1), register(2)
    assert services.version_promote(actor=approver, version=first, reason="go", expected_live=None) is not None
    assert services.version_promote(actor=approver, version=first, reason="go", expected_live=None) is None
    assert Deployment.objects.count() == 1
    services.version_promote(actor=approver, version=second, reason="go", expected_live=first)
    with pytest.raises(services.PromotionConflict, match="it is support-bot:v2 now"):
        services.version_promote(actor=approver, version=third, reason="go", expected_live=first)
    assert selectors.live_version(agent=first.agent) == second and Deployment.objects.count() == 2


def test_rollback_restores_the_exact_previous_sha256(register, approver):
    first, second, third = register(0), register(1), register(2)
    for version in (first, second, third):
        services.version_promote(actor=approver, version=version, reason="ship it")
    with pytest.raises(services.RegistryRefused, match="written reason"):
        services.version_rollback(actor=approver, agent=first.agent, reason="")
    deployment = services.version_rollback(actor=approver, agent=first.agent, reason="v3 calls the wrong tool")
    assert (deployment.action, deployment.from_version, deployment.to_version) == ("rollback", third, second)
    pointer = LivePointer.objects.get(agent=first.agent)
    assert pointer.version == second and pointer.deployment == deployment
    assert deployment.to_sha256 == second.adapter_sha256 == file_sha256(
        selectors.adapter_folder(version=pointer.version) / WEIGHTS_FILE)
    assert second.adapter_sha256 != third.adapter_sha256
    # Any earlier version in one action; a later one is not a rollback.
    services.version_rollback(actor=approver, agent=first.agent, reason="back to the start", to_version=first)
    assert selectors.live_version(agent=first.agent) == first
    with pytest.raises(services.RegistryRefused, match="earlier version"):
        services.version_rollback(actor=approver, agent=first.agent, reason="forward", to_version=third)
    with pytest.raises(services.RegistryRefused, match="no earlier version"):
        services.version_rollback(actor=approver, agent=first.agent, reason="again")


def test_the_audit_trail_and_the_history_list_every_change(register, approver):
    first, second = register(0), register(1)
    services.version_promote(actor=approver, version=first, reason="first")
    services.version_promote(actor=approver, version=second, reason="second")
    services.version_rollback(actor=approver, agent=first.agent, reason="second is worse")
    trail = list(selectors.audit_trail(agent=first.agent).order_by("created_at"))
    assert [event.action for event in trail] == ["version.register", "version.register", "version.promote",
                                                 "version.promote", "version.rollback"]
    rollback = trail[-1].data
    assert (rollback["from"], rollback["to"], rollback["reason"]) == ("support-bot:v2", "support-bot:v1",
                                                                      "second is worse")
    assert rollback["to_sha256"] == first.adapter_sha256 and trail[-1].actor_name == approver.username
    history = list(selectors.deployment_history(agent=first.agent))
    assert [(d.action, d.from_version, d.to_version) for d in history] == [
        ("rollback", second, first), ("promote", first, second), ("promote", None, first)]
    assert all(d.actor == approver for d in history)


def test_the_database_allows_one_live_version_per_agent(register, approver):
    version = register(0)
    deployment = services.version_promote(actor=approver, version=version, reason="go")
    with pytest.raises(IntegrityError), transaction.atomic():
        LivePointer.objects.create(agent=version.agent, version=version, deployment=deployment)


def test_versions_of_another_agent_are_not_a_rollback_target(register, approver, adapters):
    other = agent_create(actor=None, name="other-bot")
    mine, theirs = register(0), register(1, agent=other)
    services.version_promote(actor=approver, version=mine, reason="go")
    services.version_promote(actor=approver, version=register(2), reason="go")
    with pytest.raises(services.RegistryRefused, match="earlier version of support-bot"):
        services.version_rollback(actor=approver, agent=mine.agent, reason="x", to_version=theirs)


# --- Tags and failure rates -----------------------------------------------------------------


def trajectory(agent, external_id: str, tag: str, outcome: str) -> Trajectory:
    from django.utils import timezone

    return Trajectory.objects.create(agent=agent, source="test", external_id=external_id, content_hash=external_id,
                                     model_version=tag, outcome=outcome, ingested_at=timezone.now())  # fmt: skip


def test_a_version_tag_resolves_to_its_version_and_failure_rates_are_per_version(register, make_user):
    first, second = register(0), register(1)
    viewer = make_user(Role.VIEWER)
    assert selectors.version_by_tag(tag="support-bot:v2", viewer=viewer) == second
    assert selectors.version_by_tag(tag="support-bot:v9", viewer=viewer) is None
    assert selectors.version_by_tag(tag="gpt-4o", viewer=viewer) is None
    for index, outcome in enumerate(["failure", "failure", "success", "success"]):
        trajectory(first.agent, f"a{index}", "support-bot:v1", outcome)
    trajectory(first.agent, "b0", "support-bot:v2", "success")
    trajectory(first.agent, "c0", "prod-2024", "failure")
    rows = selectors.failures_by_version(agent=first.agent)
    assert [(row.tag, row.version, row.total, row.failures) for row in rows] == [
        ("support-bot:v2", second, 1, 0), ("support-bot:v1", first, 4, 2), ("prod-2024", None, 1, 1)]
    assert rows[1].rate == 0.5


def test_failure_rates_per_version_are_counted_from_an_index_alone(agent):
    # At a million trajectories a scan of the table took 410 ms for one agent, the index alone 65.
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's plans")
    trajectory(agent, "a0", "support-bot:v1", "failure")
    with CaptureQueriesContext(connection) as queries:
        selectors.failures_by_version(agent=agent)
    [count] = [query["sql"] for query in queries.captured_queries if "GROUP BY" in query["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("EXPLAIN " + count)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Only Scan using trajectory_agent_version_count" in plan, plan


def test_a_gate_policy_is_checked_by_trainers_policy(agent):
    with pytest.raises(services.RegistryRefused, match="alpha"):
        services.gate_policy_set(actor=None, agent=agent, policy={"alpha": 2.0})
    services.gate_policy_set(actor=None, agent=agent, policy={"max_latency_increase": 0.5})
    assert selectors.gate_policy(agent=agent).max_latency_increase == 0.5


def test_a_policy_stored_before_the_per_task_criteria_still_loads_and_launches(
    agent, register, heldout_snapshot, make_user
):
    old = {"metric": "correct_arguments", "test": "mcnemar", "alpha": 0.05, "max_unsafe_increase": 0.0,
           "max_latency_p95_increase": 0.4, "max_tokens_per_task": None, "max_tokens_increase": 0.5,
           "max_regression_failures": 1, "bootstrap_resamples": 2000}  # fmt: skip
    GatePolicy.objects.create(agent=agent, policy=old)
    policy = selectors.gate_policy(agent=agent)
    assert (policy.test, policy.max_latency_increase, policy.max_new_unsafe_tasks) == ("mcnemar", 0.4, 0)
    gate = services.gate_launch(actor=make_user(Role.TRAINER), candidate=register(0), heldout_snapshot=heldout_snapshot)
    assert gate.policy["max_latency_increase"] == 0.4 and gate.policy["max_bucket_drop"] == 0.25
    assert gate.job.hyperparameters["max_latency_increase"] == 0.4
    assert "max_latency_p95_increase" not in gate.job.hyperparameters
