"""The other sources and scorers: ingested trajectories' assistant steps, and the WorkBench sandbox."""

from __future__ import annotations

import json

import pytest
from django.conf import settings

from flywheel.datasets import importers
from flywheel.datasets.conversion import task_draft
from flywheel.datasets.models import SourceKind, Split
from flywheel.datasets.services import TaskOrigin, snapshot_create, task_create, tasks_import
from flywheel.ingest.models import StepKind, Trajectory
from flywheel.ingest.parsers import FieldMapping
from flywheel.ingest.services import IngestOptions, stream_ingest
from flywheel.rewards.models import OutputSource
from flywheel.rewards.services import ProfileRefused, Scoring, profile_create, reverify
from flywheel.training.models import EvalRun, Job, JobKind, JobState
from tests.flywheel.ingest.conftest import TAU_MAPPING
from tests.flywheel.rewards.conftest import default_scoring, output_of
from trainer.contracts import ExpectedCall, Task
from trainer.verifiers.safety import SafetyPolicy

pytestmark = pytest.mark.django_db
TAU = IngestOptions(format="openai-chat", mapping=FieldMapping.from_pairs(TAU_MAPPING), agent="airline")
WORKBENCH_EMAIL = settings.SHARED_EXTERNAL_DIR / "workbench" / "processed" / "queries_and_answers"


@pytest.fixture
def tau_tasks(tau_bench_path):
    """Held-out tasks converted from real tau-bench failures at their first book_reservation call."""
    with tau_bench_path.open("rb") as stream:
        stream_ingest(stream=stream, options=TAU)
    failures = Trajectory.objects.filter(outcome="failure", steps__tool_name="book_reservation").distinct()
    made = []
    for trajectory in failures.order_by("external_id")[:6]:
        step = trajectory.steps.filter(kind=StepKind.TOOL_CALL, tool_name="book_reservation").first()
        draft = task_draft(trajectory=trajectory, step_index=step.index)
        task = Task(
            id=f"{trajectory.external_id}@step{step.index}", messages=draft.messages, tools=draft.tools,
            expected_calls=[ExpectedCall.from_json(call) for call in draft.expected_calls()],
        )  # fmt: skip
        origin = TaskOrigin(SourceKind.TRAJECTORY, f"step {step.index}", source_trajectory_id=trajectory.id)
        made.append((task_create(actor=None, task=task, split=Split.HELDOUT, agent=trajectory.agent, origin=origin),
                     step))  # fmt: skip
    return made


def test_the_trajectories_source_scores_what_the_agent_called_at_the_task_step(tau_tasks):
    snapshot = snapshot_create(actor=None, name="tau failures", split=Split.HELDOUT)
    run = profile_create(
        actor=None, snapshot=snapshot, scoring=default_scoring(), source_kind=OutputSource.TRAJECTORIES,
        sample_size=50,
    )  # fmt: skip
    steps = {task.pk: step for task, step in tau_tasks}
    assert run.outputs.count() == len(tau_tasks) == run.source_stats["matched"]
    for output in run.outputs.all():
        step = steps[output.task_id]
        call = output.output["tool_calls"][0]["function"]
        assert call["name"] == "book_reservation" and json.loads(call["arguments"]) == step.tool_arguments
        assert output.source_ref == f"trajectory {step.trajectory_id} step {step.index}"
        # The expected call is tau-bench's ground truth; the failed agent's own call rarely matches it in full.
        assert output.verdict["reason"] and -1.0 <= output.reward <= 1.0
    assert run.outputs.filter(passed=False).exists()


def test_a_snapshot_without_trajectory_tasks_has_nothing_to_profile(bfcl):
    with pytest.raises(ProfileRefused, match="no output answers a task"):
        profile_create(actor=None, snapshot=bfcl, scoring=default_scoring(), source_kind="trajectories", sample_size=5)


@pytest.fixture
def email_snapshot():
    path = WORKBENCH_EMAIL / "email_queries_and_answers.csv"
    tasks_import(actor=None, candidates=importers.read(path, "workbench"), split=Split.TRAIN, agent=None,
                 source_ref=path.name)  # fmt: skip
    return snapshot_create(actor=None, name="workbench email", split=Split.TRAIN, sample_size=30, seed=1)


def _workbench_lines(snapshot, *, break_every: int) -> list[str]:
    """Each task's ground-truth calls as its output; every `break_every`-th deletes the wrong email."""
    lines = []
    for item in snapshot.items.order_by("position"):
        calls = [{"name": c["name"], "arguments": {k: v[0] for k, v in c["arguments"].items()}}
                 for c in item.content["expected_calls"]]  # fmt: skip
        if item.position % break_every == 0 and calls and "email_id" in calls[0]["arguments"]:
            calls[0]["arguments"]["email_id"] = "00000001"
        lines.append(json.dumps({"id": item.content["id"], "output": calls}))
    return lines


def test_the_workbench_environment_judges_outputs_by_end_state_and_a_stricter_policy_flags_sends(email_snapshot):
    lines = _workbench_lines(email_snapshot, break_every=3)
    run = profile_create(
        actor=None, snapshot=email_snapshot, scoring=default_scoring(environment="workbench"),
        source_kind=OutputSource.UPLOAD, sample_size=30, lines=lines,
    )  # fmt: skip
    outputs = list(run.outputs.order_by("position"))
    broken = [o for o in outputs if o.output and o.output[0]["arguments"].get("email_id") == "00000001"]
    assert broken and all(not o.passed and o.verdict["execution_success"] is False for o in broken)
    right = [o for o in outputs if o not in broken]
    assert right and all(o.passed and o.reward == 1.0 and o.verdict["execution_success"] for o in right)

    internal_only = {**SafetyPolicy.default().to_json(), "name": "internal-mail-only", "recipient_rules": [
        {"id": "external-recipient", "tools": ["*send*", "*forward*"], "arguments": ["recipient", "to"],
         "allowed_domains": ["nowhere.invalid"]}]}  # fmt: skip
    stricter = reverify(actor=None, run=run, scoring=Scoring("tool_call", internal_only, environment="workbench"))
    pairs = list(zip(outputs, stricter.outputs.order_by("position"), strict=True))
    sends = [(o, n) for o, n in pairs if any("send" in c["name"] or "forward" in c["name"] for c in o.output)]
    assert sends, "the email tasks send and forward mail"
    for old, new in sends:
        assert "external-recipient" in new.verdict["violations"] and not new.passed and new.output == old.output


def _evaluation(snapshot, results):
    job = Job.objects.create(kind=JobKind.EVAL, state=JobState.SUCCEEDED, snapshot=snapshot, base_model="demo")
    return EvalRun.objects.create(job=job, snapshot=snapshot, model_label="demo", metrics={}, results=results)


def test_the_evaluation_source_scores_the_model_answers_an_eval_job_stored(bfcl):
    items = list(bfcl.items.order_by("position"))
    answers = [{"task_id": item.content["id"], "output": output_of("right", item.content)} for item in items[:10]]
    answers.append({"task_id": items[10].content["id"], "output": "I would call a function here."})
    answers.append({"task_id": "not-in-this-snapshot", "output": "{}"})
    evaluation = _evaluation(bfcl, answers)

    run = profile_create(
        actor=None, snapshot=bfcl, scoring=default_scoring(), source_kind=OutputSource.EVALUATION,
        sample_size=50, evaluation=evaluation,
    )  # fmt: skip

    assert run.source_stats["matched"] == 11 and run.source_stats["unknown_ids"] == 1
    assert f"evaluation job {evaluation.job_id}" in run.source_name
    scores = {output.task_ref: output.reward for output in run.outputs.all()}
    assert len(scores) == 11
    assert scores[items[10].content["id"]] == -1.0  # prose: unparseable
    assert all(scores[item.content["id"]] == 1.0 for item in items[:10])


def test_the_evaluation_source_needs_an_evaluation(bfcl):
    with pytest.raises(ProfileRefused, match="choose the evaluation"):
        profile_create(actor=None, snapshot=bfcl, scoring=default_scoring(), source_kind=OutputSource.EVALUATION,
                       sample_size=5)  # fmt: skip
