"""Replays of a failing step: the cut, the expected answer, launch rules, recording results, permissions.

The job itself runs on a real worker with the tiny model in `test_replay_worker.py`; here the
job's done event and results file are written by hand, as a finished job leaves them.
"""

from __future__ import annotations

import io
import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from flywheel.core.models import AuditEvent
from flywheel.core.roles import Role
from flywheel.datasets.conversion import step_source_ref, task_draft
from flywheel.datasets.models import SourceKind
from flywheel.datasets.services import TaskOrigin, task_create
from flywheel.ingest.models import Trajectory
from flywheel.ingest.services import IngestOptions, stream_ingest
from flywheel.registry import selectors, services
from flywheel.registry.models import Deployment, LivePointer, Replay, ReplayStatus
from flywheel.registry.replay import replay_input
from flywheel.training import services as training_services
from flywheel.training.forms import JobLaunchForm
from flywheel.training.models import Job, JobKind, JobState, Sample
from trainer.contracts import ExpectedCall, Task

pytestmark = pytest.mark.django_db

TOOLS = [{"type": "function", "function": {"name": "find_order", "description": "Look an order up.", "parameters": {
    "type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]}}}]  # fmt: skip


def failing_record(agent_name: str = "support-bot", external_id: str = "run-1") -> dict:
    """A user asks, the model calls with a string id, the tool fails, the model retries right, then apologises."""
    steps = [
        {"kind": "system", "text": "You help with orders."},
        {"kind": "user", "text": "Where is order 17?"},
        {"kind": "tool_call", "tool": "find_order", "arguments": {"order": "17"}, "call_id": "c1"},
        {"kind": "tool_result", "call_id": "c1", "text": "order must be an integer", "error": True},
        {"kind": "tool_call", "tool": "find_order", "arguments": {"order": 17}, "call_id": "c2"},
        {"kind": "tool_result", "call_id": "c2", "text": '{"status": "shipped"}'},
        {"kind": "assistant", "text": "It has shipped."},
    ]
    return {"id": external_id, "agent": agent_name, "outcome": "failure", "model_version": f"{agent_name}:v1",
            "tools": TOOLS, "steps": steps}  # fmt: skip


@pytest.fixture
def trajectory(agent) -> Trajectory:
    stream_ingest(stream=io.BytesIO(json.dumps(failing_record()).encode() + b"\n"),
                  options=IngestOptions(format="native"))  # fmt: skip
    return Trajectory.objects.get(agent=agent, external_id="run-1")


def convert(trajectory: Trajectory, step_index: int, expected: list[ExpectedCall]):
    """A reviewer's next-call task at `step_index`, as the convert page saves it."""
    draft = task_draft(trajectory=trajectory, step_index=step_index)
    task = Task(id=f"run-1@step{step_index}", messages=draft.messages, tools=draft.tools, expected_calls=expected)
    origin = TaskOrigin(source_kind=SourceKind.TRAJECTORY, source_trajectory_id=trajectory.pk,
                        source_ref=step_source_ref(step_index))  # fmt: skip
    return task_create(actor=None, task=task, split="heldout", agent=trajectory.agent, origin=origin)


def finish_replay(replay: Replay, tmp_path: Path, line: dict | None = None, state: str = "succeeded") -> Job:
    """Close the replay's job as the worker would: its results file, its done event, job_finish."""
    case_id = replay.job.cases[0]["id"]
    line = line if line is not None else {
        "id": case_id, "output": '<tool_call>{"name": "find_order", "arguments": {"order": 17}}</tool_call>',
        "finished": True, "prompt_tokens": 40, "completion_tokens": 12, "latency_s": 0.2, "has_expected": False,
        "scores": {"calls": [{"name": "find_order", "arguments": {"order": 17}}], "valid_json": True,
                   "schema_valid": True, "unsafe": False, "correct_tool": None, "passed": None, "reward": None},
        "original_scores": {"calls": [{"name": "find_order", "arguments": {"order": "17"}}], "valid_json": True,
                            "schema_valid": False, "unsafe": False},
    }  # fmt: skip
    path = tmp_path / f"replay-{replay.pk}.jsonl"
    path.write_text(json.dumps(line) + "\n")
    Job.objects.filter(pk=replay.job_id).update(
        state=JobState.RUNNING, attempts=1,
        result={"event": "done", "metrics": {"cases": 1}, "results": str(path), "files": {"replay": str(path)}},
    )  # fmt: skip
    job = Job.objects.get(pk=replay.job_id)
    exit_code = 0 if state == "succeeded" else 1
    return training_services.job_finish(job=job, exit_code=exit_code, stderr_tail="", cancelled=False)


# --- The cut ------------------------------------------------------------------------------------


def test_the_replay_sends_the_conversation_cut_where_a_task_drafted_from_the_trajectory_is_cut(trajectory):
    draft = task_draft(trajectory=trajectory)
    prepared = replay_input(trajectory=trajectory)
    assert prepared.step_index == draft.step_index == 2  # the call the tool answered with an error
    assert prepared.case["messages"] == draft.messages
    assert [message["role"] for message in prepared.case["messages"]] == ["system", "user"]
    assert prepared.case["tools"] == draft.tools == trajectory.agent.tools
    # The recorded answer is the failing call itself, as the assistant message that made it.
    [call] = prepared.case["original"]["tool_calls"]
    assert call["function"] == {"name": "find_order", "arguments": json.dumps({"order": "17"})}
    assert prepared.case["expected"] is None and prepared.expected_source == ""


def test_another_step_is_cut_as_a_task_drafted_at_that_step(trajectory):
    prepared = replay_input(trajectory=trajectory, step_index=4)
    assert prepared.case["messages"] == task_draft(trajectory=trajectory, step_index=4).messages
    assert prepared.case["messages"][-1] == {"role": "tool", "tool_call_id": "c1",
                                             "content": "order must be an integer"}  # fmt: skip


def test_a_task_converted_at_the_step_gives_the_expected_answer_and_one_at_another_step_does_not(trajectory):
    convert(trajectory, 4, [ExpectedCall.exact("find_order", {"order": 99})])
    assert replay_input(trajectory=trajectory).case["expected"] is None
    task = convert(trajectory, 2, [ExpectedCall.exact("find_order", {"order": 17})])
    prepared = replay_input(trajectory=trajectory)
    assert prepared.case["expected"]["expected_calls"] == [{"name": "find_order", "arguments": {"order": [17]}}]
    assert prepared.expected_source == f"task {task.external_id}"


def test_a_trajectory_with_nothing_before_its_failing_step_cannot_be_replayed(agent, register, make_user):
    record = {
        "id": "lonely",
        "agent": agent.name,
        "outcome": "failure",
        "steps": [{"kind": "tool_call", "tool": "find_order", "arguments": {"order": 1}, "call_id": "c"}],
    }
    stream_ingest(stream=io.BytesIO(json.dumps(record).encode()), options=IngestOptions(format="native"))
    trajectory = Trajectory.objects.get(external_id="lonely")
    with pytest.raises(services.RegistryRefused, match="no conversation before step 0"):
        services.replay_launch(actor=make_user(Role.APPROVER), trajectory=trajectory, version=register(0))
    assert not Job.objects.exists()


# --- Launching ----------------------------------------------------------------------------------


def test_a_launch_queues_a_replay_job_with_the_versions_verified_adapter_and_the_case(
    trajectory, register, make_user, django_capture_on_commit_callbacks
):
    version = register(0)
    with django_capture_on_commit_callbacks() as callbacks:
        replay = services.replay_launch(actor=make_user(Role.TRAINER), trajectory=trajectory, version=version,
                                        options={"device": "cpu"})  # fmt: skip
    job = replay.job
    assert (job.kind, job.state, job.snapshot, job.agent) == (JobKind.REPLAY, JobState.QUEUED, None, trajectory.agent)
    assert job.adapter == str(selectors.adapter_folder(version=version)) and job.base_model == version.base_model
    assert job.cases == [replay_input(trajectory=trajectory).case] and job.hyperparameters == {"device": "cpu"}
    assert (replay.status, replay.step_index, replay.was_live) == (ReplayStatus.PENDING, 2, False)
    assert len(callbacks) == 1  # the job's message, sent after the commit
    assert AuditEvent.objects.filter(action="replay.launch", target_id=str(replay.pk)).exists()


def test_launching_twice_returns_the_first_replay_and_queues_one_job(trajectory, register, make_user):
    version, approver = register(0), make_user(Role.APPROVER)
    first = services.replay_launch(actor=approver, trajectory=trajectory, version=version)
    second = services.replay_launch(actor=approver, trajectory=trajectory, version=version)
    assert first == second and Job.objects.filter(kind=JobKind.REPLAY).count() == 1
    other = services.replay_launch(actor=approver, trajectory=trajectory, version=register(1))
    assert other != first and Job.objects.filter(kind=JobKind.REPLAY).count() == 2


def test_a_replay_whose_job_failed_can_be_launched_again(trajectory, register, make_user, tmp_path):
    version, approver = register(0), make_user(Role.APPROVER)
    first = services.replay_launch(actor=approver, trajectory=trajectory, version=version)
    finish_replay(first, tmp_path, state="failed")
    first.refresh_from_db()
    assert first.status == ReplayStatus.ERROR and "no done event" in first.error
    again = services.replay_launch(actor=approver, trajectory=trajectory, version=version)
    assert again != first and again.status == ReplayStatus.PENDING


def test_a_replay_whose_queued_job_was_cancelled_is_closed_and_launched_again(trajectory, register, make_user):
    version, approver = register(0), make_user(Role.APPROVER)
    first = services.replay_launch(actor=approver, trajectory=trajectory, version=version)
    training_services.job_cancel(actor=approver, job=first.job)  # no worker ever finishes it
    first.refresh_from_db()
    assert (first.status, first.error) == (ReplayStatus.ERROR, "the replay job ended cancelled")
    again = services.replay_launch(actor=approver, trajectory=trajectory, version=version)
    assert again != first and again.status == ReplayStatus.PENDING


def lose_worker(job: Job, *, attempts: int) -> None:
    """The job's worker died mid-attempt `attempts`: running, its heartbeat long silent."""
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, attempts=attempts,
                                         heartbeat_at=job.created_at - timedelta(hours=1))  # fmt: skip


def test_a_replay_whose_job_the_reaper_gave_up_on_ends_with_the_reason(trajectory, register, make_user):
    first = services.replay_launch(actor=make_user(Role.APPROVER), trajectory=trajectory, version=register(0))
    lose_worker(first.job, attempts=first.job.max_attempts)
    assert [job.pk for job in training_services.jobs_reap()] == [first.job_id]
    first.refresh_from_db()
    assert (first.status, first.error) == (ReplayStatus.ERROR, "worker lost after 3 attempt(s)")
    assert AuditEvent.objects.filter(action="replay.error", target_id=str(first.pk)).exists()


def test_a_replay_whose_job_is_requeued_by_the_reaper_stays_pending(trajectory, register, make_user):
    first = services.replay_launch(actor=make_user(Role.APPROVER), trajectory=trajectory, version=register(0))
    lose_worker(first.job, attempts=1)
    training_services.jobs_reap()
    first.refresh_from_db()
    assert first.status == ReplayStatus.PENDING and first.job.state == JobState.QUEUED


def test_a_version_of_another_agent_is_refused(trajectory, register, make_user):
    from flywheel.core.services import agent_create

    other = register(0, agent=agent_create(actor=None, name="other-bot"))
    with pytest.raises(services.RegistryRefused, match="not a version of support-bot"):
        services.replay_launch(actor=make_user(Role.APPROVER), trajectory=trajectory, version=other)


@pytest.mark.parametrize("role", [Role.VIEWER, Role.REVIEWER, None])
def test_only_trainers_and_approvers_may_replay(trajectory, register, make_user, role):
    with pytest.raises(PermissionDenied):
        services.replay_launch(actor=make_user(role), trajectory=trajectory, version=register(0))
    assert not Replay.objects.exists()


def test_a_replay_job_needs_its_cases_and_no_snapshot_and_other_kinds_a_snapshot(heldout_snapshot, trajectory):
    case = replay_input(trajectory=trajectory).case
    refusals = [
        {"kind": "replay", "snapshot": None, "cases": []},
        {"kind": "replay", "snapshot": heldout_snapshot, "cases": [case]},
        {"kind": "replay", "snapshot": None, "cases": [{**case, "messages": []}]},
        {"kind": "eval", "snapshot": None, "cases": []},
        {"kind": "eval", "snapshot": heldout_snapshot, "cases": [case]},
    ]
    for fields in refusals:
        with pytest.raises(training_services.LaunchRefused):
            training_services.job_launch(actor=None, base_model="tiny", **fields)
    assert not Job.objects.exists()
    assert "replay" not in dict(JobLaunchForm().fields["kind"].choices)


# --- Recording the result -----------------------------------------------------------------------


def test_a_finished_replay_job_records_the_answer_and_both_answers_scores_once(
    trajectory, register, make_user, tmp_path
):
    replay = services.replay_launch(actor=make_user(Role.APPROVER), trajectory=trajectory, version=register(0))
    job = finish_replay(replay, tmp_path)
    replay.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and replay.status == ReplayStatus.DONE
    assert replay.answer.startswith("<tool_call>") and replay.scores["schema_valid"] is True
    assert replay.original_scores["schema_valid"] is False
    assert replay.usage == {"prompt_tokens": 40, "completion_tokens": 12, "latency_s": 0.2, "finished": True}
    # Idempotent: a second store changes nothing and records nothing.
    assert services.replay_result_store(job=job) is None
    assert AuditEvent.objects.filter(action="replay.done", target_id=str(replay.pk)).count() == 1


def test_a_results_file_without_the_case_ends_the_replay_with_the_reason(trajectory, register, make_user, tmp_path):
    replay = services.replay_launch(actor=make_user(Role.APPROVER), trajectory=trajectory, version=register(0))
    finish_replay(replay, tmp_path, line={"id": "someone-else", "scores": {}})
    replay.refresh_from_db()
    assert replay.status == ReplayStatus.ERROR and "no result for" in replay.error


# --- Pages --------------------------------------------------------------------------------------


def test_a_viewer_sees_the_replays_beside_the_recorded_answer_but_no_form(
    client, trajectory, register, make_user, tmp_path
):
    replay = services.replay_launch(actor=make_user(Role.APPROVER), trajectory=trajectory, version=register(0))
    finish_replay(replay, tmp_path)
    client.force_login(make_user(Role.VIEWER))
    panel = client.get(reverse("registry:trajectory_replays", args=[trajectory.pk]))
    text = panel.content.decode()
    assert panel.status_code == 200 and "support-bot:v1" in text and "answered" in text
    assert "<form" not in text
    assert "check-bad" in text and "check-good" in text  # the recorded call's schema fails, the replay's passes
    assert 'hx-trigger="every 2s"' not in text  # nothing left to wait for
    page = client.get(reverse("registry:replay_detail", args=[replay.pk])).content.decode()
    assert "Recorded at step #2" in page
    assert "support-bot:v1 answered" in page and "Where is order 17?" in page
    # The job behind it is listed among jobs and links back to the replay.
    job_page = client.get(reverse("training:job_detail", args=[replay.job_id])).content.decode()
    assert reverse("registry:replay_detail", args=[replay.pk]) in job_page and "1 carried by the job" in job_page
    assert "1 replay case" in client.get(reverse("training:job_list")).content.decode()


def test_the_panel_polls_while_a_replay_runs_and_the_trajectory_page_loads_it(client, trajectory, register, make_user):
    approver = make_user(Role.APPROVER)
    services.replay_launch(actor=approver, trajectory=trajectory, version=register(0))
    client.force_login(approver)
    text = client.get(reverse("registry:trajectory_replays", args=[trajectory.pk])).content.decode()
    assert 'hx-trigger="every 2s"' in text and "queued" in text and "<form" in text
    page = client.get(reverse("ingest:trajectory_detail", args=[trajectory.pk])).content.decode()
    assert f'hx-get="{reverse("registry:trajectory_replays", args=[trajectory.pk])}" hx-trigger="load"' in page


@pytest.mark.parametrize(("role", "status"), [(Role.TRAINER, 302), (Role.APPROVER, 302), (Role.VIEWER, 403),
                                               (Role.REVIEWER, 403)])  # fmt: skip
def test_launching_from_the_page_is_for_trainers_and_approvers(client, trajectory, register, make_user, role, status):
    version = register(0)
    client.force_login(make_user(role))
    response = client.post(reverse("registry:replay_launch", args=[trajectory.pk]), {"version": version.pk})
    assert response.status_code == status
    assert Replay.objects.filter(version=version).exists() == (status == 302)
    if status == 302:
        assert response["Location"].endswith(f"/trajectories/{trajectory.pk}/#replays")


def test_a_viewer_is_refused_before_the_form_is_read(client, trajectory, make_user):
    client.force_login(make_user(Role.VIEWER))
    response = client.post(reverse("registry:replay_launch", args=[trajectory.pk]), {"version": "not-a-version"})
    assert response.status_code == 403


def test_an_htmx_launch_answers_with_the_panel_and_a_refusal_with_the_reason(client, trajectory, register, make_user):
    version = register(0)
    client.force_login(make_user(Role.APPROVER))
    url = reverse("registry:replay_launch", args=[trajectory.pk])
    panel = client.post(url, {"version": version.pk}, HTTP_HX_REQUEST="true")
    assert panel.status_code == 200 and "support-bot:v1" in panel.content.decode()
    refused = client.post(url, {"version": version.pk, "step": 0}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 400 and "no conversation before step 0" in refused.content.decode()


def test_replaying_the_candidate_leaves_the_live_version_and_its_history_alone(trajectory, register, make_user):
    live, candidate, approver = register(0), register(1), make_user(Role.APPROVER)
    services.version_promote(actor=approver, version=live, reason="first ship")
    replay = services.replay_launch(actor=approver, trajectory=trajectory, version=candidate)
    assert LivePointer.objects.get(agent=trajectory.agent).version == live
    assert Deployment.objects.count() == 1 and replay.was_live is False
    assert not Sample.objects.exists()
