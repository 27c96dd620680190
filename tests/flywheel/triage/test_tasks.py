"""The suggestion tasks: direct calls, and a real worker computing suggestions as trajectories are ingested."""

from __future__ import annotations

import time
from uuid import uuid4

import pytest

from flywheel.ingest.models import Trajectory
from flywheel.ingest.services import stream_ingest
from flywheel.triage import tasks
from flywheel.triage.models import Review, Suggestion
from flywheel.triage.suggestions import NEEDS_REVIEW
from tests.flywheel.triage.conftest import TAU


@pytest.mark.django_db
def test_the_task_computes_and_running_it_twice_changes_nothing(store):
    trajectory = store({"id": "t", "agent": "shop", "outcome": "failure", "steps": [{"kind": "user", "text": "x"}]})[
        "t"
    ]
    Suggestion.objects.all().delete()
    tasks.compute_suggestions([str(trajectory.pk), str(uuid4())])
    tasks.compute_suggestions([str(trajectory.pk)])
    assert list(Suggestion.objects.values_list("rule", flat=True)) == [NEEDS_REVIEW]


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("built_in_buckets")
def test_a_worker_suggests_buckets_for_trajectories_as_they_are_ingested(celery_worker_process, tau_bench_path):
    celery_worker_process("default")
    with tau_bench_path.open("rb") as stream:
        stream_ingest(stream=stream, options=TAU)
    deadline = time.monotonic() + 90
    while Review.objects.filter(suggested_at__isnull=False).count() < 200 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert Review.objects.filter(suggested_at__isnull=False).count() == Trajectory.objects.count() == 200
    assert Suggestion.objects.filter(rule=NEEDS_REVIEW).count() == 110
    assert Suggestion.objects.filter(bucket__slug="incomplete_execution").count() == 6
