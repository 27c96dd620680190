from __future__ import annotations

import pytest
from django.utils import timezone

from flywheel.core.roles import Role
from flywheel.dashboards import selectors
from flywheel.triage import services
from flywheel.triage.models import Bucket
from flywheel.triage.services import BucketChoice

pytestmark = pytest.mark.django_db


def test_failures_per_bucket_count_bucketed_and_still_suggested_trajectories(tau_airline, make_user):
    reviewer = make_user(Role.REVIEWER)
    incomplete = Bucket.objects.get(slug="incomplete_execution")
    services.review_submit(actor=reviewer, trajectory=tau_airline["15:0"], choices=[BucketChoice(incomplete, 17)])
    services.review_submit(
        actor=reviewer, trajectory=tau_airline["0:0"], choices=[BucketChoice(Bucket.objects.get(slug="bad_planning"))]
    )
    counts = {count.name: (count.assigned, count.awaiting) for count in selectors.failures_by_bucket()}
    assert counts["Incomplete execution"] == (1, 5)
    assert counts["Bad planning"] == (1, 0)
    assert counts["Format error"] == (0, 0)
    assert list(counts) == [name for name in Bucket.objects.values_list("name", flat=True)]


def test_failures_per_agent_and_model_version(tau_airline):
    [airline] = selectors.failures_by_agent()
    assert (airline.label, airline.failures, airline.total) == ("airline", 116, 200)
    [version] = selectors.failures_by_model_version()
    assert (version.label, version.failures) == ("(none)", 116)


def test_failures_per_day_split_by_bucket(tau_airline, make_user):
    services.bucket_bulk_assign(
        actor=make_user(Role.REVIEWER),
        bucket=Bucket.objects.get(slug="wrong_tool"),
        trajectory_ids=[tau_airline["0:0"].pk],
    )
    today = timezone.localdate()
    rows = {(row.day, row.series): row.count for row in selectors.failures_by_day()}
    assert rows == {(today, "not bucketed"): 115, (today, "Wrong tool"): 1}
