from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.utils import timezone

from flywheel.core.models import CountSummary
from flywheel.core.roles import Role
from flywheel.ingest.models import Trajectory
from flywheel.ingest.selectors import TrajectoryFilters
from flywheel.monitoring.models import OnlineScore
from flywheel.triage import selectors, services
from flywheel.triage.models import Bucket
from flywheel.triage.selectors import TriageFilters
from flywheel.triage.services import BucketChoice
from flywheel.triage.suggestions import NEEDS_REVIEW
from tests.flywheel.triage.conftest import call, result, shop_record, user

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(make_user):
    """A user who sees every agent: these tests count and list every agent's rows."""
    return make_user(Role.VIEWER)


@pytest.fixture
def stored(store):
    return store(
        shop_record(
            "error", [user(), call("lookup_order", {"order_id": "1"}), result("lookup_order", "Error", error=True)]
        ),
        shop_record("plain", [user(), {"kind": "assistant", "text": "No."}], model_version="shop:v2"),
        shop_record("ok", [user()], outcome="success"),
    )


def external_ids(rows) -> list[str]:
    return sorted(row.external_id for row in rows)


def test_filters_round_trip_through_json_as_queues_store_them():
    filters = TriageFilters(
        base=TrajectoryFilters(outcome="failure", agent="shop", has_error=True, since=date(2026, 1, 2)),
        suggested=NEEDS_REVIEW,
    )
    assert filters.to_json() == {
        "outcome": "failure",
        "agent": "shop",
        "has_error": True,
        "since": "2026-01-02",
        "suggested": NEEDS_REVIEW,
    }
    assert TriageFilters.from_json(filters.to_json()) == filters
    assert TriageFilters().is_empty() and not filters.is_empty()


def test_an_online_score_filter_round_trips_through_json():
    filters = TriageFilters(online_scorer="safety", online_below=1.0)
    assert filters.to_json() == {"online_scorer": "safety", "online_below": 1.0}
    assert TriageFilters.from_json(filters.to_json()) == filters


def test_the_list_filters_by_an_online_scorers_verdict_below_a_threshold(stored, operator):
    for name, scorer, value in (("error", "safety", 0.0), ("plain", "safety", 1.0), ("ok", "schema", 0.0)):
        OnlineScore.objects.create(trajectory=stored[name], scorer=scorer, value=value, passed=value == 1.0)

    def matching(scorer: str, below: float) -> list[str]:
        filters = TriageFilters(online_scorer=scorer, online_below=below)
        return external_ids(selectors.triage_queryset(filters, viewer=operator))

    assert matching("safety", 1.0) == ["error"]
    assert matching("safety", 1.5) == ["error", "plain"]
    assert matching("schema", 1.0) == ["ok"]
    assert matching("catalogue", 1.0) == []
    assert matching("safety", 0.0) == []


def test_the_list_filters_by_suggested_bucket_assigned_bucket_and_review_state(stored, make_user, operator):
    def matching(**kwargs) -> list[str]:
        return external_ids(selectors.triage_queryset(TriageFilters(**kwargs), viewer=operator))

    assert matching(suggested="incomplete_execution") == ["error"]
    assert matching(suggested=NEEDS_REVIEW) == ["plain"]
    assert matching(base=TrajectoryFilters(model_version="shop:v2")) == ["plain"]
    reviewer = make_user(Role.REVIEWER)
    services.review_submit(
        actor=reviewer, trajectory=stored["plain"], choices=[BucketChoice(Bucket.objects.get(slug="bad_planning"))]
    )
    assert matching(bucket="bad_planning") == ["plain"]
    assert matching(state="reviewed") == ["plain"]
    assert matching(state="unreviewed") == ["error", "ok"]


def test_the_list_pages_newest_first_with_a_cursor(stored, operator):
    first, cursor = selectors.triage_page(viewer=operator, filters=TriageFilters(), after=None, size=2)
    rest, end = selectors.triage_page(viewer=operator, filters=TriageFilters(), after=cursor, size=2)
    assert [t.external_id for t in first + rest] == ["ok", "plain", "error"]
    assert end is None


def test_queue_progress_counts_per_queue_and_per_reviewer(stored, make_user, operator):
    rita, sam = make_user(Role.REVIEWER, "rita"), make_user(Role.REVIEWER, "sam")
    queue = services.queue_create(
        actor=rita,
        name="fails",
        filters=TriageFilters(base=TrajectoryFilters(outcome="failure")),
        reviewers=[rita, sam],
    )
    held = services.queue_next(queue=queue, reviewer=rita)
    services.review_submit(actor=rita, trajectory=held, choices=[])
    services.queue_next(queue=queue, reviewer=sam)
    exact = selectors.queue_progress(queue, viewer=operator)
    progress = selectors.queue_progress_counted([queue], viewer=operator)[queue.pk]  # no summary yet: counted now
    for counted in (exact, progress):
        assert (counted.total, counted.reviewed, counted.skipped, counted.claimed, counted.remaining) == (2, 1, 0, 1, 1)
    assert progress.percent == 50
    assert [
        (r.username, r.reviewed, r.skipped, r.holding)
        for r in selectors.queue_reviewers_counted(queue, viewer=operator)
    ] == [
        ("rita", 1, 0, 0),
        ("sam", 0, 0, 1),
    ]


def test_a_queue_with_an_empty_filter_holds_only_what_was_added_by_hand(stored, make_user):
    reviewer = make_user(Role.REVIEWER)
    queue = services.queue_create(actor=reviewer, name="picked", filters=TriageFilters())
    assert not selectors.queue_members(queue, viewer=reviewer).exists()
    services.queue_items_add(actor=reviewer, queue=queue, trajectory_ids=[stored["ok"].pk])
    assert external_ids(selectors.queue_members(queue, viewer=reviewer)) == ["ok"]


def test_the_review_page_opens_unreviewed_with_suggested_buckets_on_at_their_step(stored, operator):
    page = selectors.review_page(viewer=operator, trajectory_id=stored["error"].pk)
    on = [(s.bucket.slug, s.key, s.step_index) for s in page.buckets if s.checked]
    assert on == [("incomplete_execution", "7", 2)]
    assert page.marked_step == 2
    assert [s.key for s in page.buckets] == ["1", "2", "3", "4", "5", "6", "7"]


def test_the_review_page_shows_what_was_saved_once_reviewed(stored, make_user, operator):
    reviewer = make_user(Role.REVIEWER)
    services.review_submit(actor=reviewer, trajectory=stored["error"], choices=[])
    page = selectors.review_page(viewer=operator, trajectory_id=stored["error"].pk)
    assert not any(state.checked for state in page.buckets)
    assert [s.suggested for s in page.buckets].count(True) == 1


def test_the_tenth_bucket_gets_key_zero_and_later_ones_none(make_user):
    admin = make_user(Role.ADMIN)
    for number in range(4):
        services.bucket_create(actor=admin, name=f"Custom {number}")
    keys = [selectors.bucket_keys(selectors.bucket_list()).get(b.pk) for b in selectors.bucket_list()]
    assert keys[7:] == ["8", "9", "0", None]


def test_the_queue_list_counts_each_queue_as_its_own_page_does(stored, make_user, operator):
    rita = make_user(Role.REVIEWER, "rita")
    failures = TriageFilters(base=TrajectoryFilters(outcome="failure"))
    queues = [
        services.queue_create(actor=rita, name="fails", filters=failures),
        services.queue_create(actor=rita, name="all", filters=TriageFilters(base=TrajectoryFilters(agent="shop"))),
        services.queue_create(actor=rita, name="by hand", filters=TriageFilters()),
    ]
    services.review_submit(actor=rita, trajectory=services.queue_next(queue=queues[0], reviewer=rita), choices=[])
    listed = dict(selectors.queue_list(viewer=operator))
    assert [_numbers(listed[queue]) for queue in queues] == [
        _numbers(selectors.queue_progress(q, viewer=operator)) for q in queues
    ]
    assert [(listed[queue].total, listed[queue].reviewed) for queue in queues] == [(2, 1), (3, 1), (0, 0)]


def _numbers(progress: selectors.QueueProgress) -> tuple[int, int, int, int]:
    return progress.total, progress.reviewed, progress.skipped, progress.claimed


def test_queue_progress_is_as_of_its_summary_and_claims_are_live(stored, make_user, operator, settings):
    rita = make_user(Role.REVIEWER, "rita")
    queue = services.queue_create(
        actor=rita, name="recounted", filters=TriageFilters(base=TrajectoryFilters(outcome="failure"))
    )
    before = selectors.queue_progress_counted([queue], viewer=operator)[queue.pk]
    claimed = services.queue_next(queue=queue, reviewer=rita)
    after_claim = selectors.queue_progress_counted([queue], viewer=operator)[queue.pk]
    assert (after_claim.claimed, after_claim.counted_at) == (before.claimed + 1, before.counted_at)  # claims: live
    services.review_submit(actor=rita, trajectory=claimed, choices=[])
    own = selectors.queue_progress_counted([queue], viewer=operator)[queue.pk]
    assert (own.reviewed, own.counted_at) == (before.reviewed + 1, before.counted_at)  # a reviewer's own save: at once
    other = Trajectory.objects.filter(outcome="failure").exclude(pk=claimed.pk).first()
    services.review_bulk_mark_reviewed(actor=rita, trajectory_ids=[other.pk])
    stale = selectors.queue_progress_counted([queue], viewer=operator)[queue.pk]
    assert (stale.reviewed, stale.counted_at) == (before.reviewed + 1, before.counted_at)  # bulk: as of its count
    services.queue_summaries_recount()
    recounted = selectors.queue_progress_counted([queue], viewer=operator)[queue.pk]
    assert _numbers(recounted) == _numbers(selectors.queue_progress(queue, viewer=operator))
    assert recounted.reviewed == before.reviewed + 2 and recounted.counted_at > before.counted_at


def test_a_summary_older_than_the_stale_limit_is_recounted_by_the_page(stored, make_user, operator, settings):
    rita = make_user(Role.REVIEWER, "rita")
    queue = services.queue_create(
        actor=rita, name="old", filters=TriageFilters(base=TrajectoryFilters(outcome="failure"))
    )
    selectors.queue_progress_counted([queue], viewer=operator)
    services.review_skip(actor=rita, trajectory=services.queue_next(queue=queue, reviewer=rita))
    settings.SUMMARY_STALE_SECONDS = 1
    CountSummary.objects.update(counted_at=timezone.now() - timedelta(seconds=2))  # beat stopped a while ago
    assert selectors.queue_progress_counted([queue], viewer=operator)[queue.pk].skipped == 1


def test_editing_a_queue_or_its_items_recounts_it_on_the_next_view(stored, make_user, operator):
    rita = make_user(Role.REVIEWER, "rita")
    queue = services.queue_create(actor=rita, name="edited", filters=TriageFilters())
    assert selectors.queue_progress_counted([queue], viewer=operator)[queue.pk].total == 0
    services.queue_items_add(actor=rita, queue=queue, trajectory_ids=[stored["ok"].pk, stored["plain"].pk])
    assert selectors.queue_progress_counted([queue], viewer=operator)[queue.pk].total == 2
    services.queue_item_remove(actor=rita, queue=queue, trajectory=stored["ok"])
    assert selectors.queue_progress_counted([queue], viewer=operator)[queue.pk].total == 1
    services.queue_update(actor=rita, queue=queue, name="edited", reviewers=[],
                          filters=TriageFilters(base=TrajectoryFilters(outcome="failure")))  # fmt: skip
    assert _numbers(selectors.queue_progress_counted([queue], viewer=operator)[queue.pk]) == _numbers(
        selectors.queue_progress(queue, viewer=operator)
    )


def test_the_queue_lists_and_next_merge_the_filters_matches_and_the_items_in_order(stored, make_user):
    rita = make_user(Role.REVIEWER, "rita")
    failures = TriageFilters(base=TrajectoryFilters(outcome="failure"))
    queue = services.queue_create(actor=rita, name="mixed", filters=failures)
    services.queue_items_add(actor=rita, queue=queue, trajectory_ids=[stored["ok"].pk])  # a success: by hand only
    oldest_first = ["error", "ok", "plain"]  # the item between the filter's two matches
    for hours, name in enumerate(reversed(oldest_first)):
        Trajectory.objects.filter(pk=stored[name].pk).update(ingested_at=timezone.now() - timedelta(hours=hours))
    waiting = selectors.queue_waiting_members(queue, viewer=rita, limit=2)
    assert [member.trajectory.external_id for member in waiting] == oldest_first[:2]
    handed = [services.queue_next(queue=queue, reviewer=make_user(Role.REVIEWER)) for _ in range(3)]
    assert [trajectory.external_id for trajectory in handed] == oldest_first
    for name in ("plain", "ok", "error"):
        services.review_submit(actor=rita, trajectory=stored[name], choices=[])
    recent = selectors.queue_recent_members(queue, viewer=rita, limit=2)
    assert [member.trajectory.external_id for member in recent] == ["error", "ok"]
