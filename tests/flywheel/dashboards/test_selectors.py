from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from flywheel.core.roles import Role
from flywheel.dashboards import selectors
from flywheel.training.models import JobState
from flywheel.triage import services
from flywheel.triage.models import Bucket
from flywheel.triage.services import BucketChoice

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(make_user):
    """A user who sees every agent: these tests count and list every agent's rows."""
    return make_user(Role.VIEWER)


def test_failures_per_bucket_count_bucketed_and_still_suggested_trajectories(tau_airline, make_user, operator):
    reviewer = make_user(Role.REVIEWER)
    incomplete = Bucket.objects.get(slug="incomplete_execution")
    services.review_submit(actor=reviewer, trajectory=tau_airline["15:0"], choices=[BucketChoice(incomplete, 17)])
    services.review_submit(
        actor=reviewer, trajectory=tau_airline["0:0"], choices=[BucketChoice(Bucket.objects.get(slug="bad_planning"))]
    )
    counts = {
        count.name: (count.assigned, count.awaiting)
        for count in selectors.failures_by_bucket(selectors.dashboard_counts(viewer=operator))
    }
    assert counts["Incomplete execution"] == (1, 5)
    assert counts["Bad planning"] == (1, 0)
    assert counts["Format error"] == (0, 0)
    assert list(counts) == [name for name in Bucket.objects.values_list("name", flat=True)]


def test_failures_per_agent_and_model_version(tau_airline, operator):
    [airline] = selectors.failures_by_agent(selectors.dashboard_counts(viewer=operator))
    assert (airline.label, airline.failures, airline.total) == ("airline", 116, 200)
    [version] = selectors.failures_by_model_version(selectors.dashboard_counts(viewer=operator))
    assert (version.label, version.failures) == ("(none)", 116)


def test_failures_per_day_split_by_bucket(tau_airline, make_user, operator):
    services.bucket_bulk_assign(
        actor=make_user(Role.REVIEWER),
        bucket=Bucket.objects.get(slug="wrong_tool"),
        trajectory_ids=[tau_airline["0:0"].pk],
    )
    today = timezone.localdate()
    rows = {
        (row.day, row.series): row.count
        for row in selectors.failures_by_day(selectors.dashboard_counts(viewer=operator))
    }
    assert rows == {(today, "not bucketed"): 115, (today, "Wrong tool"): 1}


def test_task_counts_split_train_and_heldout(make_tasks, make_snapshot, operator):
    make_tasks("train", 4)
    make_tasks("heldout", 1)
    make_snapshot("heldout")
    make_snapshot("train")
    assert selectors.task_counts(viewer=operator) == selectors.TaskCounts(train=4, heldout=1, snapshots=2)


def test_job_counts_take_the_job_that_finished_last(make_job, operator):
    make_job(JobState.RUNNING)
    make_job(JobState.QUEUED)
    make_job(JobState.QUEUED)
    make_job(JobState.SUCCEEDED, finished_at=timezone.now() - timedelta(days=1))
    last = make_job(JobState.CANCELLED, finished_at=timezone.now())
    counts = selectors.job_counts(viewer=operator)
    assert (counts.running, counts.queued, counts.last_finished) == (1, 2, last)


def test_no_job_finished_yet(make_job, operator):
    make_job(JobState.RUNNING)
    assert selectors.job_counts(viewer=operator).last_finished is None


def test_a_live_version_shows_the_gate_it_was_promoted_on_over_later_gates(make_live, make_gate, operator):
    version = make_live("airline", 2, candidate=(0.6, 0.5, 0.7), baseline=(0.35, 0.25, 0.45))
    make_gate(version, candidate=(0.1, 0.0, 0.2), passed=False)  # a later gate, failed
    [live] = selectors.live_versions(viewer=operator)
    assert live.version == version and not live.override
    gate = live.gate
    assert gate is not None and gate.passed and gate.against == "base model"
    assert (gate.metric, gate.metric_label) == ("correct_arguments", "correct arguments")
    assert gate.candidate == selectors.GateRate(0.6, 0.5, 0.7)
    assert gate.baseline == selectors.GateRate(0.35, 0.25, 0.45)
    assert gate.gain == pytest.approx(0.25)


def test_a_version_promoted_without_a_gate_shows_its_latest_passed_gate_else_none(
    make_live, make_gate, make_version, operator
):
    version = make_live("airline", 2, gate=False)
    assert [(live.override, live.gate) for live in selectors.live_versions(viewer=operator)] == [(True, None)]
    previous = make_version("airline", 1)
    passed = make_gate(version, metric="execution_success", against=previous)
    make_gate(version, passed=False)
    [live] = selectors.live_versions(viewer=operator)
    assert live.gate is not None and live.gate.pk == passed.pk
    assert (live.gate.metric, live.gate.against) == ("execution_success", "airline:v1")


def test_a_gate_report_without_the_metric_gives_empty_rates(make_live, operator):
    version = make_live("airline")
    version.gate_results.update(report={})
    [live] = selectors.live_versions(viewer=operator)
    assert live.gate is not None and live.gate.candidate == selectors.GateRate(None, None, None)
    assert live.gate.gain is None and live.gate.candidate.spread is None


def test_live_versions_come_by_agent_name(make_live, operator):
    for name in ("telecom", "airline", "retail"):
        make_live(name)
    assert [live.version.tag for live in selectors.live_versions(viewer=operator)] == [
        "airline:v2",
        "retail:v2",
        "telecom:v2",
    ]
