"""The LLM judge in the rewards app: reviewers' labels, a judge run and its judgements, agreement, approval.

The judge's model runs in a `judge` job; here its results file is written by the test (the worker
test, test_judge_worker.py, runs a real one), so each figure below is known exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.core.services import agent_create
from flywheel.rewards import selectors, services
from flywheel.rewards.models import AgentJudge, JudgeRun, ProfileRun, default_rubric
from flywheel.training.models import Job, JobKind, JobState
from flywheel.training.selectors import approved_judge_agreement
from flywheel.training.services import LaunchRefused, job_launch
from trainer.verifiers.judge import judge_agreement

pytestmark = pytest.mark.django_db


def mark(judged_run: ProfileRun, reviewer, count: int, verdict: str = "agree") -> list:
    outputs = list(judged_run.outputs.order_by("position")[:count])
    for output in outputs:
        services.mark_set(actor=reviewer, output=output, verdict=verdict)
    return outputs


def finish_judge(judge_run: JudgeRun, tmp_path: Path, passed_of) -> Job:
    """End the judge run's job as a worker would: its results file, one line per item it was given."""
    job = judge_run.job
    lines = []
    for case in job.cases:
        passed = passed_of(int(case["id"]))
        score = None if passed is None else (0.9 if passed else 0.1)
        reason = "unreadable reply: no score found" if passed is None else f"judged {passed}"
        lines.append({"id": case["id"], "score": score, "passed": passed, "reason": reason, "raw": "Score: …"})
    path = tmp_path / f"judgements-{job.pk}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, result={"event": "done", "results": str(path)})
    job.refresh_from_db()
    return job


def test_a_mark_gives_the_reviewers_label_and_reviewers_who_tie_give_none(judged_run, make_user):
    first, second = make_user(Role.TRAINER), make_user(Role.TRAINER)
    one, two, three = judged_run.outputs.order_by("position")[:3]
    services.mark_set(actor=first, output=one, verdict="agree")  # keeps the verifier's pass/fail
    services.mark_set(actor=first, output=two, verdict="disagree")  # flips it
    services.mark_set(actor=first, output=three, verdict="agree")
    services.mark_set(actor=second, output=three, verdict="disagree")  # a tie: no label
    assert selectors.reviewer_labels(run=judged_run) == {one.pk: one.passed, two.pk: not two.passed}


def test_the_judge_is_launched_on_the_labelled_outputs_with_the_agents_rubric(judged_run, judged_agent, make_user):
    trainer = make_user(Role.TRAINER)
    rubric = {"criteria": "The call answers the question.", "pass_means": "Right tool and arguments.",
              "scale_max": 5, "pass_score": 0.6}  # fmt: skip
    AgentJudge.objects.create(agent=judged_agent, base_model="demo", adapter="", rubric=rubric, agreement_threshold=0.7)
    marked = mark(judged_run, trainer, 3)
    judge_run = services.judge_run_launch(actor=trainer, run=judged_run)
    job = judge_run.job
    assert (job.kind, job.state, job.agent, job.snapshot) == (JobKind.JUDGE, JobState.QUEUED, judged_agent, None)
    assert job.hyperparameters == {"rubric": rubric} and judge_run.rubric == rubric
    assert [case["id"] for case in job.cases] == [str(output.pk) for output in marked]
    first = job.cases[0]
    assert first["messages"] == marked[0].item.content["messages"] and first["answer"] == marked[0].output


def test_the_judge_is_not_launched_before_any_mark(judged_run, make_user):
    with pytest.raises(services.ProfileRefused, match="no output of this run is marked"):
        services.judge_run_launch(actor=make_user(Role.TRAINER), run=judged_run)
    assert not Job.objects.exists()


def test_judgements_are_stored_once_and_set_against_the_labels(judged_run, make_user, tmp_path):
    trainer = make_user(Role.TRAINER)
    marked = mark(judged_run, trainer, 10)
    labels = selectors.reviewer_labels(run=judged_run)
    judge_run = services.judge_run_launch(actor=trainer, run=judged_run)
    # The judge agrees on the first 6, contradicts the next 3, and cannot answer the last.
    order = [output.pk for output in marked]
    job = finish_judge(judge_run, tmp_path, lambda pk: None if order.index(pk) == 9 else
                       labels[pk] if order.index(pk) < 6 else not labels[pk])  # fmt: skip
    assert services.judge_result_store(job=job) == 10
    assert services.judge_result_store(job=job) == 0 and judge_run.judgements.count() == 10  # safe to run twice
    report = selectors.judge_report(run=judged_run)
    assert (report.agreement.n, report.agreement.agreed, report.agreement.unreadable) == (10, 6, 1)
    assert report.enough_labels is False
    assert [row.output.pk for row in report.disagreements] == order[6:]
    assert report.disagreements[-1].judgement.score is None


def test_the_finished_signal_stores_a_judge_jobs_judgements(judged_run, make_user, tmp_path):
    trainer = make_user(Role.TRAINER)
    mark(judged_run, trainer, 2)
    judge_run = services.judge_run_launch(actor=trainer, run=judged_run)
    job = finish_judge(judge_run, tmp_path, lambda pk: True)
    services.on_job_finished(sender=Job, job=job)
    assert judge_run.judgements.count() == 2


def measured(judged_run, make_user, tmp_path, labelled: int, agreeing: int) -> None:
    """`labelled` outputs marked, judged by the agent's current judge, agreeing with the first `agreeing`."""
    trainer = make_user(Role.TRAINER)
    order = [output.pk for output in mark(judged_run, trainer, labelled)]
    labels = selectors.reviewer_labels(run=judged_run)
    judge_run = services.judge_run_launch(actor=trainer, run=judged_run)
    services.judge_result_store(job=finish_judge(judge_run, tmp_path, lambda pk: labels[pk]
                                                 if order.index(pk) < agreeing else not labels[pk]))  # fmt: skip


def test_an_unmeasured_judge_is_not_approved(judged_agent):
    approval = selectors.judge_approval(agent=judged_agent)
    assert approval.approved is False and "has not been measured" in approval.reason


def test_a_judge_measured_on_too_few_labels_is_not_approved(judged_run, judged_agent, make_user, tmp_path):
    measured(judged_run, make_user, tmp_path, labelled=49, agreeing=49)
    approval = selectors.judge_approval(agent=judged_agent)
    assert approval.approved is False and approval.reason.startswith("not enough labels") and "49" in approval.reason


def test_a_judge_at_the_threshold_on_enough_labels_is_approved_and_below_it_is_not(
    judged_run, judged_agent, make_user, tmp_path
):
    AgentJudge.objects.create(agent=judged_agent, agreement_threshold=0.8)
    measured(judged_run, make_user, tmp_path, labelled=50, agreeing=40)
    approval = selectors.judge_approval(agent=judged_agent)
    assert approval.approved is True and approval.agreement.rate.value == 0.8
    AgentJudge.objects.filter(agent=judged_agent).update(agreement_threshold=0.81)
    approval = selectors.judge_approval(agent=judged_agent)
    assert approval.approved is False and "80.0% on 50 labelled outputs, threshold 81%" in approval.reason


def test_changing_the_judges_rubric_needs_a_new_measurement(judged_run, judged_agent, make_user, tmp_path):
    judge = AgentJudge.objects.create(agent=judged_agent, agreement_threshold=0.5)
    measured(judged_run, make_user, tmp_path, labelled=50, agreeing=50)
    assert selectors.judge_approval(agent=judged_agent).approved is True
    judge.rubric = {**judge.rubric, "criteria": "Something else entirely."}
    judge.save()
    assert selectors.judge_approval(agent=judged_agent).approved is False


def grpo_launch(run: ProfileRun, user, reward: str, **knobs) -> Job:
    snapshot = run.snapshot
    return job_launch(actor=user, kind="grpo", snapshot=snapshot, base_model="demo", agent=snapshot.agent,
                      hyperparameters={"reward": reward, **knobs})  # fmt: skip


def test_a_grpo_launch_with_an_unapproved_judge_as_its_reward_is_refused_naming_the_figures(
    judged_run, judged_agent, make_user, tmp_path
):
    AgentJudge.objects.create(agent=judged_agent, agreement_threshold=0.9)
    measured(judged_run, make_user, tmp_path, labelled=50, agreeing=30)
    trainer = make_user(Role.TRAINER)
    with pytest.raises(LaunchRefused, match=r"not approved as a training reward: .*60\.0% on 50 .*threshold 90%"):
        grpo_launch(judged_run, trainer, "judge")
    assert not Job.objects.filter(kind=JobKind.GRPO).exists()
    assert grpo_launch(judged_run, trainer, "verifier").kind == JobKind.GRPO  # the verifier's reward needs no judge


def test_a_grpo_launch_with_an_approved_judge_as_its_reward_is_queued_with_that_judge(
    judged_run, judged_agent, make_user, tmp_path
):
    rubric = {**default_rubric(), "criteria": "Refunds only after the user confirmed."}
    AgentJudge.objects.create(agent=judged_agent, agreement_threshold=0.8, adapter="/adapters/judge-v2", rubric=rubric)
    measured(judged_run, make_user, tmp_path, labelled=50, agreeing=45)
    job = grpo_launch(judged_run, make_user(Role.TRAINER), "judge")
    assert job.hyperparameters["reward"] == "judge" and job.state == JobState.QUEUED
    # The trainer runs the judge the approval measured, not one the launch names.
    assert (job.hyperparameters["judge_model"], job.hyperparameters["judge_adapter"]) == ("demo", "/adapters/judge-v2")
    assert job.hyperparameters["judge_rubric"] == rubric


def test_a_grpo_launch_judging_by_groups_is_queued_with_the_approved_judge(
    judged_run, judged_agent, make_user, tmp_path
):
    AgentJudge.objects.create(agent=judged_agent, agreement_threshold=0.8, adapter="/adapters/judge-v2")
    measured(judged_run, make_user, tmp_path, labelled=50, agreeing=45)
    job = grpo_launch(judged_run, make_user(Role.TRAINER), "judge", judge_mode="group", judge_max_new_tokens=128)
    assert (job.hyperparameters["judge_mode"], job.state) == ("group", JobState.QUEUED)
    assert (job.hyperparameters["judge_model"], job.hyperparameters["judge_adapter"]) == ("demo", "/adapters/judge-v2")


def test_a_grpo_launch_judging_by_groups_is_refused_like_any_other_without_an_approved_judge_or_reply_room(
    judged_run, judged_agent, make_user, tmp_path
):
    judge = AgentJudge.objects.create(agent=judged_agent, agreement_threshold=0.9)
    measured(judged_run, make_user, tmp_path, labelled=50, agreeing=30)
    trainer = make_user(Role.TRAINER)
    with pytest.raises(LaunchRefused, match="not approved as a training reward"):
        grpo_launch(judged_run, trainer, "judge", judge_mode="group", judge_max_new_tokens=128)
    judge.agreement_threshold = 0.5
    judge.save()
    with pytest.raises(LaunchRefused, match=r"judge_max_new_tokens must be at least 128 \(16 per candidate"):
        grpo_launch(judged_run, trainer, "judge", judge_mode="group")  # the default 64 tokens: 8 candidates need 128
    with pytest.raises(LaunchRefused, match="judge_mode group is how the judge reward scores: it needs reward judge"):
        grpo_launch(judged_run, trainer, "verifier", judge_mode="group")
    assert not Job.objects.filter(kind=JobKind.GRPO).exists()


@pytest.mark.parametrize(("agreeing", "expected"), [(45, 0.9), (30, None)])
def test_the_recommendation_counts_on_the_judge_only_once_it_is_approved(
    judged_run, judged_agent, make_user, tmp_path, agreeing, expected
):
    AgentJudge.objects.create(agent=judged_agent, agreement_threshold=0.8)
    measured(judged_run, make_user, tmp_path, labelled=50, agreeing=agreeing)
    assert approved_judge_agreement(agent=judged_agent) == expected


def test_the_agreement_figure_is_the_trainers_own(judged_run, make_user, tmp_path):
    measured(judged_run, make_user, tmp_path, labelled=12, agreeing=8)
    labels = selectors.reviewer_labels(run=judged_run)
    rows = JudgeRun.objects.get().judgements.all()
    assert selectors.judge_report(run=judged_run).agreement == judge_agreement(
        [(r.passed, labels[r.output_id]) for r in rows]
    )


# --- pages ----------------------------------------------------------------------------------------


def test_the_judge_page_shows_the_agreement_the_disagreements_and_not_enough_labels(
    client, judged_run, make_user, tmp_path
):
    measured(judged_run, make_user, tmp_path, labelled=10, agreeing=7)
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("rewards:run_judge", args=[judged_run.pk])).content.decode()
    assert "data-not-enough" in page and "Not enough labels: 10 labelled outputs judged, 50 are needed" in page
    assert "70%" in page and "7/10" in page and page.count('id="judged-') == 3
    assert 'data-approval="refused"' in page and "Judge the" not in page  # a viewer cannot launch
    judgings = reverse("rewards:judge_buckets", kwargs={"agent_name": judged_run.snapshot.agent.name})
    assert f'href="{judgings}" data-judgings-link' in page


def test_launching_from_the_page_queues_a_judge_job_and_a_refusal_is_shown(client, judged_run, make_user):
    trainer = make_user(Role.TRAINER)
    client.force_login(trainer)
    url = reverse("rewards:run_judge_launch", args=[judged_run.pk])
    refused = client.post(url)
    assert refused.status_code == 400 and "no output of this run is marked" in refused.content.decode()
    mark(judged_run, trainer, 2)
    assert client.post(url).status_code == 302
    job = Job.objects.get()
    assert job.kind == JobKind.JUDGE
    job_page = client.get(reverse("training:job_detail", args=[job.pk]))
    assert job_page.status_code == 200 and "Judge" in job_page.content.decode()


def test_a_viewer_cannot_launch_the_judge(client, judged_run, make_user):
    client.force_login(make_user(Role.VIEWER))
    assert client.post(reverse("rewards:run_judge_launch", args=[judged_run.pk])).status_code == 403
    assert not Job.objects.exists()


def test_an_outsider_gets_404_for_another_agents_judge_page(client, judged_run, make_user):
    outsider = make_user(Role.TRAINER, agents=[agent_create(actor=None, name="other-bot")])
    client.force_login(outsider)
    assert client.get(reverse("rewards:run_judge", args=[judged_run.pk])).status_code == 404
    assert client.post(reverse("rewards:run_judge_launch", args=[judged_run.pk])).status_code == 404
