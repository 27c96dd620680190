"""The LLM judge as an online scorer: sampled trajectories wait as requests, go out in one judge job per agent at a
time, and come back as `judge` scores, once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flywheel.core.roles import Role
from flywheel.monitoring.forms import ScoringRuleForm
from flywheel.monitoring.models import JudgeRequest, JudgeRequestState, OnlineScore
from flywheel.monitoring.services import RuleFields, rule_create, scores_compute
from flywheel.rewards.models import AgentJudge
from flywheel.training.models import Job, JobKind, JobState
from flywheel.training.signals import job_finished

from .conftest import SAFE_CALL, shop

pytestmark = pytest.mark.django_db


@pytest.fixture
def judged(agent, make_user):
    """A trainer's rule that judges every trajectory of the shop agent, whose judge is a model of the team's."""
    AgentJudge.objects.create(agent=agent, base_model="/models/judge", adapter="/adapters/judge")
    fields = RuleFields(name="judged", scorers=("judge", "safety"))
    return rule_create(actor=make_user(Role.TRAINER, agents=[agent]), agent=agent, fields=fields)


def score(store, capture, *names: str) -> dict:
    stored = store(*(shop(name, [SAFE_CALL]) for name in names))
    with capture(execute=True):
        scores_compute(trajectory_ids=[row.pk for row in stored.values()])
    return stored


def finish(job: Job, tmp_path: Path, capture, state: str = JobState.SUCCEEDED, replies: dict | None = None) -> None:
    """End the job as its worker would, with one judgement line per item (`replies`: item index -> score)."""
    path = tmp_path / f"{job.pk}.jsonl"
    lines = [{"id": item["id"], "score": (replies or {}).get(index), "passed": None, "reason": f"reason {index}",
              "raw": ""} for index, item in enumerate(job.cases)]  # fmt: skip
    for line in lines:
        line["passed"] = None if line["score"] is None else line["score"] >= 0.5
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    Job.objects.filter(pk=job.pk).update(state=state, result={"results": str(path)})
    job.refresh_from_db()
    with capture(execute=True):
        job_finished.send(sender=Job, job=job)


def judge_jobs() -> list[Job]:
    return list(Job.objects.filter(kind=JobKind.JUDGE).order_by("created_at"))


def test_sampled_trajectories_go_to_one_judge_job_with_the_agents_judge(
    store, judged, django_capture_on_commit_callbacks
):
    stored = score(store, django_capture_on_commit_callbacks, "a", "b")
    # The inline scorers scored at once; the judge's verdicts wait for its job.
    assert set(OnlineScore.objects.values_list("scorer", flat=True)) == {"safety"}
    [job] = judge_jobs()
    assert (job.base_model, job.adapter, job.agent_id, job.state) == ("/models/judge", "/adapters/judge",
                                                                      judged.agent_id, JobState.QUEUED)
    assert job.launched_by == judged.created_by
    requests = JudgeRequest.objects.filter(rule=judged)
    assert {r.trajectory_id for r in requests} == {row.pk for row in stored.values()}
    assert {r.state for r in requests} == {JudgeRequestState.SENT}
    assert {item["id"] for item in job.cases} == {str(r.pk) for r in requests}
    assert all(item["messages"][0] == {"role": "user", "content": "Please help with my order."} for item in job.cases)
    # Scoring again (the sweep) asks nothing twice, and no second job goes out while one is out.
    with django_capture_on_commit_callbacks(execute=True):
        scores_compute(trajectory_ids=[row.pk for row in stored.values()])
    assert len(judge_jobs()) == 1 and requests.count() == 2


def test_the_judgements_come_back_as_judge_scores_once(store, judged, django_capture_on_commit_callbacks, tmp_path):
    score(store, django_capture_on_commit_callbacks, "a", "b", "c")
    [job] = judge_jobs()
    finish(job, tmp_path, django_capture_on_commit_callbacks, replies={0: 0.9, 1: 0.2})
    scores = {s.trajectory_id: s for s in OnlineScore.objects.filter(scorer="judge")}
    by_item = {int(item["id"]): index for index, item in enumerate(job.cases)}
    requests = {r.pk: r for r in JudgeRequest.objects.all()}
    passed = {requests[pk].trajectory_id: index for pk, index in by_item.items()}
    assert len(scores) == 2  # the third reply had no score: no verdict is made up for it
    for trajectory_id, index in passed.items():
        if index == 2:
            assert trajectory_id not in scores
            assert JudgeRequest.objects.get(trajectory_id=trajectory_id).state == JudgeRequestState.UNREADABLE
        else:
            row = scores[trajectory_id]
            assert (row.value, row.passed, row.detail["reason"]) == ({0: 0.9, 1: 0.2}[index], index == 0,
                                                                     f"reason {index}")
    job_finished.send(sender=Job, job=job)  # delivered twice
    assert OnlineScore.objects.filter(scorer="judge").count() == 2
    assert not judge_jobs()[1:]  # nothing waited: no new job


def test_requests_that_arrive_while_a_job_is_out_go_in_the_next_one(
    store, judged, django_capture_on_commit_callbacks, tmp_path
):
    score(store, django_capture_on_commit_callbacks, "a")
    score(store, django_capture_on_commit_callbacks, "b", "c")
    [first] = judge_jobs()
    assert len(first.cases) == 1
    finish(first, tmp_path, django_capture_on_commit_callbacks, replies={0: 1.0})
    second = judge_jobs()[1]
    assert len(second.cases) == 2 and second.state == JobState.QUEUED


def test_a_failed_job_puts_its_requests_back_until_their_attempts_are_spent(
    store, judged, django_capture_on_commit_callbacks, tmp_path, settings
):
    settings.MONITOR_JUDGE_ATTEMPTS = 2
    score(store, django_capture_on_commit_callbacks, "a")
    finish(judge_jobs()[0], tmp_path, django_capture_on_commit_callbacks, state=JobState.FAILED)
    request = JudgeRequest.objects.get()
    assert (request.state, request.attempts) == (JudgeRequestState.SENT, 2)  # sent again in a new job
    finish(judge_jobs()[1], tmp_path, django_capture_on_commit_callbacks, state=JobState.FAILED)
    request.refresh_from_db()
    assert request.state == JudgeRequestState.FAILED and len(judge_jobs()) == 2
    assert not OnlineScore.objects.filter(scorer="judge").exists()


def test_a_new_rule_does_not_tick_the_judge(agent):
    assert "judge" not in ScoringRuleForm(agent=agent).fields["scorers"].initial
