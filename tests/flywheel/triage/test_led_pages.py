"""The triage list led by a bucket, suggestion or review-state filter (PostgreSQL, migration triage 0008):
the same pages, in the same order, as the newest-first walk, whatever the chunk boundaries."""

from __future__ import annotations

import random

import pytest
from django.db import connection, transaction

from flywheel.core.roles import Role
from flywheel.ingest import selectors as lists
from flywheel.ingest.models import Feedback, Trajectory
from flywheel.ingest.selectors import FEEDBACK_ANY, TrajectoryFilters, trajectory_page, trajectory_queryset
from flywheel.triage import selectors
from flywheel.triage.models import Bucket, BucketAssignment, Review, ReviewState, Suggestion
from flywheel.triage.selectors import TriageFilters
from flywheel.triage.suggestions import NEEDS_REVIEW

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the leading indexes are PostgreSQL's"),
]


@pytest.fixture
def airline(tau_airline, make_user):
    """The 200 tau-bench trajectories with the rules' suggestions (110 need review, 6 incomplete
    execution), and, spread at random (seeded): a bucketed third, reviewed or skipped; 60 more
    suggestions of any bucket, 20 of them twice (from a second rule); feedback on 40 (thumbs or
    scores, some twice); 30 pairs stored in the same microsecond; the trajectories suggested
    incomplete execution also carrying wrong_tool."""
    rng = random.Random(7)
    trajectories = list(Trajectory.objects.order_by("pk"))
    buckets = list(Bucket.objects.filter(built_in=True))
    reviewer = make_user(Role.REVIEWER)
    for trajectory in rng.sample(trajectories, 70):
        BucketAssignment.objects.create(trajectory=trajectory, bucket=rng.choice(buckets), assigned_by=reviewer)
        Review.objects.filter(trajectory=trajectory).update(
            state=rng.choice([ReviewState.REVIEWED, ReviewState.SKIPPED])
        )
    more = [
        Suggestion(trajectory=trajectory, bucket=rng.choice(buckets), rule="first-rule", reason="x")
        for trajectory in rng.sample(trajectories, 60)
    ]
    twice = [
        Suggestion(trajectory=row.trajectory, bucket=row.bucket, rule="second-rule", reason="x") for row in more[:20]
    ]
    Suggestion.objects.bulk_create(more + twice)
    for trajectory in rng.sample(trajectories, 40):
        for _ in range(rng.choice([1, 1, 2])):  # a user changing their mind: feedback twice
            thumb = rng.choice(["up", "down", ""])
            Feedback.objects.create(trajectory=trajectory, thumb=thumb, score=None if thumb else rng.random())
    # Ties: pairs of trajectories stored in the same microsecond, ordered by id (copies kept equal as the
    # migration's backfill does; the app never changes a stored trajectory's ingested_at).
    with connection.cursor() as cursor:
        for first, second in zip(trajectories[0:60:2], trajectories[1:60:2], strict=True):
            cursor.execute(
                "UPDATE ingest_trajectory SET ingested_at = %s WHERE id = %s", [first.ingested_at, second.pk]
            )
        for table in ("triage_bucketassignment", "triage_suggestion", "triage_review", "ingest_feedback"):
            cursor.execute(
                f"UPDATE {table} AS row SET trajectory_ingested_at = t.ingested_at FROM ingest_trajectory AS t "
                "WHERE t.id = row.trajectory_id"
            )
    wrong_tool = Bucket.objects.get(slug="wrong_tool")
    for row in Suggestion.objects.filter(bucket__slug="incomplete_execution"):
        BucketAssignment.objects.get_or_create(trajectory=row.trajectory, bucket=wrong_tool)
    return make_user(Role.VIEWER)


def _walked(filters: TriageFilters, viewer) -> list[str]:
    rows = selectors.triage_queryset(filters, viewer=viewer).order_by("-ingested_at", "-id")
    return [str(pk) for pk in rows.values_list("pk", flat=True)]


def _paged(filters: TriageFilters, viewer, size: int) -> list[str]:
    shown, cursor = [], None
    while True:
        page, cursor = selectors.triage_page(filters=filters, viewer=viewer, after=cursor, size=size)
        shown += [str(row.pk) for row in page]
        if cursor is None:
            return shown


FILTERS = [
    TriageFilters(bucket="wrong_tool"),
    TriageFilters(bucket="bad_planning"),
    TriageFilters(suggested="incomplete_execution"),
    TriageFilters(suggested="hallucinated_api"),
    TriageFilters(suggested=NEEDS_REVIEW),
    TriageFilters(state=ReviewState.REVIEWED),
    TriageFilters(state=ReviewState.SKIPPED),
    TriageFilters(base=TrajectoryFilters(outcome="failure"), state=ReviewState.REVIEWED),
    TriageFilters(bucket="wrong_tool", suggested="incomplete_execution"),
    TriageFilters(base=TrajectoryFilters(feedback="down")),
    TriageFilters(base=TrajectoryFilters(feedback=FEEDBACK_ANY), state=ReviewState.REVIEWED),
]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda filters: str(filters.to_json()))
def test_a_led_list_pages_exactly_as_the_walk_across_chunk_boundaries(airline, monkeypatch, filters, led_pages):
    monkeypatch.setattr(lists, "_LEAD_CHUNK", 3)
    monkeypatch.setattr(lists, "LEAD_ROWS", 300)
    expected = _walked(filters, airline)
    assert expected, "a filter that matches nothing proves nothing"
    assert _paged(filters, airline, size=4) == expected
    assert led_pages and all(led_pages)


@pytest.mark.parametrize("feedback", ["up", "down", FEEDBACK_ANY])
def test_the_trajectory_list_led_by_feedback_pages_exactly_as_the_walk(airline, monkeypatch, feedback, led_pages):
    monkeypatch.setattr(lists, "_LEAD_CHUNK", 3)
    filters = TrajectoryFilters(feedback=feedback)
    expected = [
        str(pk)
        for pk in trajectory_queryset(filters, viewer=airline)
        .order_by("-ingested_at", "-id")
        .values_list("pk", flat=True)
    ]
    assert expected
    shown, cursor = [], None
    while True:
        page, cursor = trajectory_page(filters=filters, viewer=airline, after=cursor, size=4)
        shown += [str(row.pk) for row in page]
        if cursor is None:
            break
    assert shown == expected
    assert led_pages and all(led_pages)


def test_when_the_leading_rows_run_out_the_walk_gives_the_page(airline, monkeypatch, led_pages):
    """Another agent's filter rejects every leading row: after LEAD_ROWS of them the list is walked."""
    monkeypatch.setattr(lists, "_LEAD_CHUNK", 3)
    monkeypatch.setattr(lists, "LEAD_ROWS", 6)
    filters = TriageFilters(base=TrajectoryFilters(outcome="success"), suggested=NEEDS_REVIEW)
    expected = _walked(filters, airline)
    assert _paged(filters, airline, size=4) == expected
    assert False in led_pages


def test_every_leading_row_carries_its_trajectorys_place_in_the_list(airline):
    """The trigger fills the copy on every insert: the ORM's create and bulk_create above, the app's own
    writes in the fixture (suggestions and reviews), never NULL, never another trajectory's."""
    _assert_copies_match()


def test_the_copy_is_filled_with_the_foreign_key_triggers_off(airline):
    """The load generator COPYs under session_replication_role = replica, which skips ordinary triggers."""
    trajectory = Trajectory.objects.order_by("pk").first()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = replica")
        Feedback.objects.create(trajectory=trajectory, thumb="up")
        Suggestion.objects.create(trajectory=trajectory, bucket=None, rule="replica-rule", reason="x")
        _assert_copies_match()


def _assert_copies_match() -> None:
    with connection.cursor() as cursor:
        for table in ("triage_bucketassignment", "triage_suggestion", "triage_review", "ingest_feedback"):
            cursor.execute(
                f"SELECT count(*), count(*) FILTER (WHERE row.trajectory_ingested_at IS DISTINCT FROM t.ingested_at) "
                f"FROM {table} AS row JOIN ingest_trajectory AS t ON t.id = row.trajectory_id"
            )
            rows, wrong = cursor.fetchone()
            assert (rows > 0, wrong) == (True, 0), table
