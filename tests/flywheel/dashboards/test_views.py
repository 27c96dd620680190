from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from flywheel.core.roles import Role
from flywheel.dashboards.services import summaries_recount
from flywheel.training.models import JobKind, JobState

pytestmark = pytest.mark.django_db


def test_the_home_page_has_triage_tiles_and_the_bucket_chart(client, make_user, tau_airline):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("dashboards:home")).content.decode()
    assert '<span class="figure" data-count="unreviewed-failures">116</span>' in page
    assert "Plotly.newPlot" in page and "Incomplete execution" in page
    assert "/static/vendor/plotly.min.js" in page


def test_the_dashboards_page_has_four_charts(client, make_user, tau_airline):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("dashboards:index")).content.decode()
    assert page.count("Plotly.newPlot(") == 4
    for title in ("per failure bucket", "Failures per agent", "Failures per model version", "Failures over time"):
        assert title in page


def _home(client, make_user) -> str:
    client.force_login(make_user(Role.VIEWER))
    return client.get(reverse("dashboards:home")).content.decode()


def test_the_home_page_counts_tasks_per_split_and_snapshots(client, make_user, make_tasks, make_snapshot):
    make_tasks("train", 3)
    make_tasks("heldout", 2)
    make_snapshot("train")
    page = _home(client, make_user)
    assert '<span class="figure" data-count="train-tasks">3</span>' in page
    assert '<span class="figure" data-count="heldout-tasks">2</span>' in page
    assert '<span class="figure" data-count="snapshots">1</span>' in page
    tasks = reverse("datasets:task_list")
    assert f'href="{tasks}?split=train"' in page and f'href="{tasks}?split=heldout"' in page
    assert f'href="{reverse("datasets:snapshot_list")}"' in page


def test_the_home_page_counts_running_and_queued_jobs_and_shows_the_last_finished(client, make_user, make_job):
    make_job(JobState.RUNNING)
    make_job(JobState.RUNNING)
    make_job(JobState.QUEUED)
    make_job(JobState.FAILED, finished_at=timezone.now() - timedelta(hours=2))
    last = make_job(JobState.SUCCEEDED, kind=JobKind.GRPO, finished_at=timezone.now() - timedelta(minutes=5))
    page = _home(client, make_user)
    assert '<span class="figure" data-count="running-jobs">2</span>' in page
    assert '<span class="figure" data-count="queued-jobs">1</span>' in page
    jobs = reverse("training:job_list")
    assert f'href="{jobs}?state=running"' in page and f'href="{jobs}?state=queued"' in page
    assert f'href="{reverse("training:job_detail", args=[last.pk])}"' in page
    assert 'data-state="last-job">Succeeded</span>' in page and "last job: GRPO" in page


def test_the_home_page_shows_the_live_version_with_its_gate_metric_against_the_base_model(client, make_user, make_live):
    version = make_live("airline", 2, candidate=(0.62, 0.51, 0.72), baseline=(0.4, 0.3, 0.5))
    page = _home(client, make_user)
    assert f'<a class="figure" href="{reverse("registry:version_detail", args=["airline", 2])}">airline:v2</a>' in page
    assert "Held-out correct arguments" in page
    assert '62% <span class="interval">[51%, 72%]</span>' in page
    assert '<th scope="row">base model</th>' in page
    assert '40% <span class="interval">[30%, 50%]</span>' in page
    assert 'data-rate="gain">+22 pts</td>' in page
    gate = version.gate_results.get()
    assert f'href="{reverse("registry:gate_detail", args=[gate.pk])}">gate passed →</a>' in page
    assert "No version is live" not in page


def test_the_home_page_says_when_no_version_is_live(client, make_user, make_version):
    make_version("airline", 1)  # registered, never promoted
    page = _home(client, make_user)
    assert "No version is live" in page
    assert f'<a href="{reverse("registry:version_list")}">Models →</a>' in page


def test_the_home_page_reads_in_a_bounded_number_of_queries(
    client, make_user, make_live, make_gate, make_tasks, make_job, django_assert_max_num_queries
):
    client.force_login(make_user(Role.VIEWER))
    make_tasks("train", 2)
    make_job(JobState.SUCCEEDED, finished_at=timezone.now())
    make_live("airline")
    summaries_recount()  # as beat does
    with CaptureQueriesContext(connection) as one_agent:
        client.get(reverse("dashboards:home"))
    for name in ("retail", "telecom", "shop"):
        make_gate(make_live(name, 3), passed=False)
    summaries_recount()
    with django_assert_max_num_queries(21) as four_agents:  # 20, and one for the open regression alerts
        page = client.get(reverse("dashboards:home")).content.decode()
    assert len(four_agents) == len(one_agent)  # no query per live version or gate
    assert all(f"{name}:v3" in page for name in ("retail", "telecom", "shop"))
