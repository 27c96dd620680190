"""Two reviewers asking for "next" at once, from their own database connections, get different items.

Transactional tests: each thread has its own connection (Django opens one per thread), so the
claims really race on PostgreSQL, through `SELECT ... FOR UPDATE SKIP LOCKED`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection, connections, transaction

from flywheel.core.roles import Role
from flywheel.ingest.selectors import TrajectoryFilters
from flywheel.triage import services
from flywheel.triage.models import Review
from flywheel.triage.selectors import TriageFilters
from tests.flywheel.triage.conftest import shop_record, user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("built_in_buckets")]
REVIEWERS = 4


def in_threads(work: list[Callable[[], object]]) -> list[object]:
    """Run each callable in its own thread and connection, all released at once; their results in order."""
    barrier = threading.Barrier(len(work))
    results: list[object] = [None] * len(work)
    errors: list[BaseException] = []

    def run(position: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[position] = work[position]()
        except BaseException as error:  # reported in the main thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(position,)) for position in range(len(work))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    return results


@pytest.fixture
def queue(store, make_user):
    store(*[shop_record(f"t{n}", [user(f"order {n}")]) for n in range(REVIEWERS + 2)])
    filters = TriageFilters(base=TrajectoryFilters(outcome="failure"))
    return services.queue_create(actor=make_user(Role.REVIEWER), name="failures", filters=filters)


def test_reviewers_asking_at_the_same_moment_get_different_trajectories(queue, make_user):
    reviewers = [make_user(Role.REVIEWER) for _ in range(REVIEWERS)]
    handed = in_threads([lambda r=r: services.queue_next(queue=queue, reviewer=r) for r in reviewers])
    assert None not in handed
    assert len({trajectory.pk for trajectory in handed}) == REVIEWERS
    claims = dict(Review.objects.filter(claimed_by__isnull=False).values_list("trajectory_id", "claimed_by_id"))
    assert claims == {trajectory.pk: reviewer.pk for trajectory, reviewer in zip(handed, reviewers, strict=True)}


def test_the_conditional_update_also_never_hands_one_item_twice(queue, make_user):
    reviewers = [make_user(Role.REVIEWER) for _ in range(REVIEWERS)]

    def claim(reviewer):
        candidates = services.selectors.queue_candidates(queue, viewer=reviewer)
        return services._claim_conditional(candidates, reviewer).trajectory_id

    handed = in_threads([lambda r=r: claim(r) for r in reviewers])
    assert len(set(handed)) == REVIEWERS


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks are PostgreSQL's; SQLite locks the file")
def test_a_row_another_connection_has_locked_is_skipped_without_waiting(queue, make_user):
    first = services.selectors.queue_candidates_first(queue, viewer=make_user(Role.REVIEWER), limit=1)[0]
    locked, release = threading.Event(), threading.Event()

    def hold_the_first_row() -> None:
        with transaction.atomic():
            Review.objects.select_for_update().get(pk=first.pk)
            locked.set()
            release.wait(timeout=20)

    holder = threading.Thread(target=lambda: (hold_the_first_row(), connections.close_all()))
    holder.start()
    try:
        assert locked.wait(timeout=10)
        started = time.monotonic()
        handed = services.queue_next(queue=queue, reviewer=make_user(Role.REVIEWER))
        waited = time.monotonic() - started
    finally:
        release.set()
        holder.join(timeout=20)
    assert handed is not None and handed.pk != first.trajectory_id
    assert waited < 1.5
