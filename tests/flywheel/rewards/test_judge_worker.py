"""A judge run on real processes: launched from the judge page, run by a real Celery worker on the `gpu` queue
with the tiny model, its judgements stored and set against the reviewers' labels."""

from __future__ import annotations

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.rewards.models import AgentJudge, JudgeRun
from flywheel.training.models import JobState
from tests.flywheel.rewards.test_judge import mark
from tests.flywheel.training.conftest import wait_for
from tests.trainer.tiny_model import TINY_MODEL

pytestmark = [pytest.mark.slow, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_judge_job_runs_on_a_real_worker_and_its_judgements_are_stored(
    client, judged_run, judged_agent, make_user, celery_worker_process
):
    celery_worker_process("gpu")
    AgentJudge.objects.create(agent=judged_agent, base_model=str(TINY_MODEL))
    trainer = make_user(Role.TRAINER)
    marked = mark(judged_run, trainer, 3)
    client.force_login(trainer)
    assert client.post(reverse("rewards:run_judge_launch", args=[judged_run.pk])).status_code == 302
    judge_run = JudgeRun.objects.get()
    # Each reply is the tiny model's noise: what this checks is the path, not the judge's wisdom.
    job = wait_for(judge_run.job, (JobState.SUCCEEDED, JobState.FAILED), timeout=180)
    assert job.state == JobState.SUCCEEDED, job.error + job.log_tail
    judgements = {row.output_id: row for row in judge_run.judgements.all()}
    assert sorted(judgements) == sorted(output.pk for output in marked)
    for row in judgements.values():
        assert row.raw.startswith("Score:") and row.reason and (row.score is None) == (row.passed is None)
    assert job.result["metrics"]["items"] == 3
    page = client.get(reverse("rewards:run_judge", args=[judged_run.pk])).content.decode()
    assert "Not enough labels: 3 labelled outputs judged" in page
